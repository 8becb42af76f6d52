// Package docs holds the tests that keep the README and docs/ true to the
// tree: every package in the layout table, every job state and error word
// documented, every link resolving, and the boundaries docs/architecture.md
// claims.
package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/docs/layout"
)

// root is the repository, from this package's directory.
const root = "../.."

const module = "github.com/commandcore/commandcore/"

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// section returns the text of the Markdown section headed heading, up to
// the next heading of any level.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("no section %q", heading)
	}
	if i := strings.Index(rest, "\n#"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// constants returns the words of the constants of type typ that path (a
// Go file in the repository) declares as string literals, one a line
// (`Name Type = "word"`), the way jobmeta and errcode declare theirs.
func constants(t *testing.T, path, typ string) []string {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^\s*\w+\s+` + regexp.QuoteMeta(typ) + `\s*=\s*"(\w+)"`)
	var out []string
	for _, m := range decl.FindAllStringSubmatch(read(t, path), -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatalf("no %s constants in %s", typ, path)
	}
	return out
}

// TestLayoutTableIsGenerated: the README's layout table is what `make
// generate` writes from the tree: a row for every package under cmd/,
// internal/ and bench/, each described by the first sentence of the
// package's own doc comment, and marked a leaf exactly when it imports no
// package of ours. A package added without a doc comment, or a row edited
// by hand, fails here.
func TestLayoutTableIsGenerated(t *testing.T) {
	pkgs, err := layout.Packages(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 60 {
		t.Fatalf("found only %d packages", len(pkgs))
	}
	readme := read(t, "README.md")
	want := string(layout.Table(pkgs))
	if !strings.Contains(readme, want) {
		t.Errorf("the README's layout table is stale; run make generate")
	}
	for _, p := range pkgs {
		if p.Synopsis == "" {
			t.Errorf("%s has no doc comment to describe it", p.Dir)
		}
	}
	if !strings.Contains(section(t, readme, "### Layout"), want) {
		t.Error("the layout table is not in the README's Layout section")
	}
}

// TestStatesAreDocumented: docs/states.md has a row for every job state
// and failure domain of internal/jobmeta.
func TestStatesAreDocumented(t *testing.T) {
	doc := read(t, "docs/states.md")
	words := append(constants(t, "internal/jobmeta/state.go", "State"), "systemd_unit", "shared_parent_cgroup")
	for _, w := range words {
		if !strings.Contains(doc, "\n| `"+w+"` |") {
			t.Errorf("docs/states.md has no row for %s", w)
		}
	}
}

// TestErrorCodesAreDocumented: the README's "Tools" section names every
// error word a client can see.
func TestErrorCodesAreDocumented(t *testing.T) {
	tools := section(t, read(t, "README.md"), "### Tools")
	for _, code := range constants(t, "internal/errcode/errcode.go", "Code") {
		if !strings.Contains(tools, "`"+code+"`") {
			t.Errorf("the README's Tools section does not name the error code %s", code)
		}
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)

// TestLinksResolve: every relative link in the README and docs/ names a
// file of the repository.
func TestLinksResolve(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"))
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			if strings.Contains(m[1], "://") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(page), m[1])); err != nil {
				t.Errorf("%s links to %s, which does not exist", filepath.Base(page), m[1])
			}
		}
	}
}

// TestBoundaries: what docs/architecture.md says a package never links.
// The relay's boundary has its own test in internal/relay.
func TestBoundaries(t *testing.T) {
	never := map[string][]string{
		"internal/supervisor": {"net/http", "github.com/gorilla/websocket", "github.com/modelcontextprotocol/go-sdk/mcp",
			"modernc.org/sqlite", "github.com/godbus/dbus/v5", "github.com/spf13/cobra"},
		"internal/jobs": {"net/http", "github.com/gorilla/websocket", "github.com/modelcontextprotocol/go-sdk/mcp"},
		"internal/transport": {module + "internal/jobs", module + "internal/tools", module + "internal/supervisor",
			module + "internal/activity", module + "internal/relay/store", "modernc.org/sqlite"},
	}
	for pkg, banned := range never {
		out, err := exec.Command("go", "list", "-deps", module+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		deps := map[string]bool{}
		for _, dep := range strings.Fields(string(out)) {
			deps[dep] = true
		}
		if !deps[module+pkg] {
			t.Fatalf("go list -deps %s does not list the package itself", pkg)
		}
		for _, b := range banned {
			if deps[b] {
				t.Errorf("%s links %s", pkg, b)
			}
		}
	}
}

// TestArchitectureArrowsAreImports: in docs/architecture.md's package
// list, every package an entry's arrow names (`a` → `b`, `c`) is a direct
// import of the entry's package, and every package called a leaf (an
// entry "— leaf:", a "leaves:" list, the shared leaves) imports no
// package of ours.
func TestArchitectureArrowsAreImports(t *testing.T) {
	list := section(t, read(t, "docs/architecture.md"), "## Packages")
	imports := goImports(t)
	name := regexp.MustCompile("`([a-z][a-z0-9/]*)`")
	entries := regexp.MustCompile(`(?m)^- `).Split(list, -1)
	checked := 0
	leaf := func(pkg string) {
		if deps, ok := imports[pkg]; ok && len(deps) > 0 {
			t.Errorf("architecture.md calls %s a leaf; it imports %v", pkg, deps)
		}
		checked++
	}
	_, shared, _ := strings.Cut(list, "**Shared leaves**:")
	shared, _, _ = strings.Cut(shared, "Just above them")
	for _, m := range name.FindAllStringSubmatch(shared, -1) {
		leaf(m[1])
	}
	for _, e := range entries[1:] {
		e = strings.SplitN(e, "\n\n", 2)[0]
		if rest, ok := strings.CutPrefix(e, "leaves:"); ok {
			for _, m := range name.FindAllStringSubmatch(rest, -1) {
				leaf(m[1])
			}
			continue
		}
		if m := name.FindStringSubmatch(e); m != nil && strings.Contains(e, "— leaf") {
			leaf(m[1])
		}
		// Arrows inside a package's parenthesis: `a` (what it is; → `b`).
		for _, g := range inline.FindAllStringSubmatch(e, -1) {
			for _, m := range name.FindAllStringSubmatch(g[2], -1) {
				if _, isPkg := imports[m[1]]; isPkg && !slices.Contains(imports[g[1]], m[1]) {
					t.Errorf("architecture.md says %s → %s; %s imports %v", g[1], m[1], g[1], imports[g[1]])
				}
				checked++
			}
		}
		e = inline.ReplaceAllString(e, "")
		head, arrow, ok := strings.Cut(e, "→")
		if !ok {
			continue
		}
		pkg := name.FindStringSubmatch(head)
		if pkg == nil {
			continue
		}
		deps, known := imports[pkg[1]]
		if !known {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(arrow, -1) {
			if _, isPkg := imports[m[1]]; isPkg && !slices.Contains(deps, m[1]) {
				t.Errorf("architecture.md says %s → %s; %s imports %v", pkg[1], m[1], pkg[1], deps)
			}
			checked++
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d arrows and leaves", checked)
	}
}

// inline is a package with its own arrow in parentheses after it.
var inline = regexp.MustCompile("`([a-z][a-z0-9/]*)` \\([^()]*?→([^()]*)\\)")

// goImports maps each package under internal/ (by its path below
// internal/) to the packages of ours it imports, tests aside.
func goImports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./internal/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module+"internal/")
		m[pkg] = []string{}
		for _, imp := range f[1:] {
			if dep, ok := strings.CutPrefix(imp, module+"internal/"); ok {
				m[pkg] = append(m[pkg], dep)
			}
		}
	}
	return m
}
