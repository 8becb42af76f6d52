package layout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes files (path: content) under a new directory.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestPackagesReadTheTree: every directory with Go files is a row, by its
// doc comment (a test file's when the package has only tests); a package
// is a leaf when its code imports nothing of the module, and never when it
// has no code; testdata and directories without Go files are not rows.
func TestPackagesReadTheTree(t *testing.T) {
	root := tree(t, map[string]string{
		"cmd/tool/main.go":               "// Command tool does one thing.\npackage main\n",
		"internal/a/a.go":                "// Package a is the first one. More.\npackage a\n\nimport \"fmt\"\n\nvar _ = fmt.Sprint\n",
		"internal/b/b.go":                "// Package b uses a.\npackage b\n\nimport _ \"" + Module + "internal/a\"\n",
		"internal/b/b_test.go":           "package b\n",
		"internal/c/c_test.go":           "// Package c holds tests only.\npackage c\n\nimport _ \"" + Module + "internal/a\"\n",
		"internal/d/testdata/x/x.go":     "package x\n",
		"internal/e/README":              "no Go here",
		"bench/t/t_test.go":              "// Package t measures.\npackage t\n",
		"internal/f/f.go":                "package f\n",
		"internal/a/sub/s.go":            "// Package sub is | piped.\npackage sub\n",
		"internal/g/g_test.go":           "// Package g_test is external.\npackage g_test\n\nimport _ \"" + Module + "internal/b\"\n",
		"internal/g/g.go":                "// Package g is tested from outside.\npackage g\n",
		"internal/.hidden/h.go":          "package h\n",
		"internal/a/sub/testdata/bad.go": "not go at all {",
	})
	pkgs, err := Packages(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pkgs {
		got = append(got, p.Dir+" = "+p.Description())
	}
	want := []string{
		"bench/t = measures",
		"cmd/tool = leaf: does one thing",
		"internal/a = leaf: the first one",
		"internal/a/sub = leaf: \\| piped",
		"internal/b = uses a",
		"internal/c = holds tests only",
		"internal/f = leaf: ",
		"internal/g = leaf: tested from outside",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	os.WriteFile(filepath.Join(root, "internal/a/broken.go"), []byte("packag a\n"), 0o644)
	if _, err := Packages(root); err == nil || !strings.Contains(err.Error(), "broken.go") {
		t.Errorf("a file that does not parse: %v", err)
	}
}

// TestReplaceSwapsOnlyTheTable: the text between the markers is replaced,
// markers included, and a README without them is an error.
func TestReplaceSwapsOnlyTheTable(t *testing.T) {
	table := Table([]Package{{Dir: "internal/x", Synopsis: "Package x is a thing.", Leaf: true}})
	want := Begin + "\n| package | what it is |\n|---|---|\n| `internal/x` | leaf: a thing |\n" + End
	if string(table) != want {
		t.Fatalf("table:\n%s", table)
	}
	out, err := Replace([]byte("before\n"+Begin+"\nold rows\n"+End+"\nafter\n"), table)
	if err != nil || string(out) != "before\n"+want+"\nafter\n" {
		t.Fatalf("%q, %v", out, err)
	}
	for _, bad := range []string{"no markers", End + " " + Begin, Begin + " only"} {
		if _, err := Replace([]byte(bad), table); err == nil {
			t.Errorf("%q: replaced", bad)
		}
	}
}
