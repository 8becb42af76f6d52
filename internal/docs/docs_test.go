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
	"strings"
	"testing"
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

// TestLayoutListsEveryPackage: the README's layout table names every
// directory under internal/, and cmd/ and bench/, and nothing that is gone.
func TestLayoutListsEveryPackage(t *testing.T) {
	table := section(t, read(t, "README.md"), "### Layout")
	entries, err := os.ReadDir(filepath.Join(root, "internal"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range entries {
		if e.IsDir() {
			want = append(want, "internal/"+e.Name())
		}
	}
	if len(want) < 40 {
		t.Fatalf("found only %d directories under internal/", len(want))
	}
	want = append(want, "cmd/commandcore", "bench/")
	for _, dir := range want {
		if !strings.Contains(table, "`"+dir) {
			t.Errorf("the README's layout table does not list %s", dir)
		}
	}
	for _, m := range tablePackage.FindAllStringSubmatch(table, -1) {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("the README's layout table lists %s, which does not exist", m[1])
		}
	}
}

// tablePackage is a package the layout table names, such as `internal/cli`.
var tablePackage = regexp.MustCompile("`((?:internal|cmd|bench)/[\\w/]+)")

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
			module + "internal/activity", module + "internal/relaystate", "modernc.org/sqlite"},
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
