package fileops

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/owndirs"
)

func TestList(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "b.txt"), "12345", 0o640)
	writeFile(t, filepath.Join(root, "a", "inner.txt"), "x", 0o644)
	writeFile(t, filepath.Join(root, "a", "deeper", "deepest.txt"), "x", 0o644)
	writeFile(t, filepath.Join(root, ".git", "HEAD"), "x", 0o644)
	if err := os.Symlink(root, filepath.Join(root, "loop")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	paths := func(r *ListResult) []string {
		var out []string
		for _, e := range r.Entries {
			out = append(out, e.Path[len(root):]+":"+e.Type)
		}
		return out
	}
	r, err := List(context.Background(), nil, ListRequest{Path: root})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(r), []string{"/.git:dir", "/a:dir", "/b.txt:file", "/loop:symlink", "/pipe:fifo"}; !equal(got, want) || r.Truncated {
		t.Fatalf("depth 1: %v (truncated %v), want %v", got, r.Truncated, want)
	}
	b := r.Entries[2]
	if b.Size != 5 || b.Mode != "0640" || b.MTime.IsZero() || r.Entries[3].Target != root {
		t.Fatalf("entries %+v", r.Entries)
	}
	r, err = List(context.Background(), nil, ListRequest{Path: root, Depth: 10, ExcludeDirs: []string{".git"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/a:dir", "/a/deeper:dir", "/a/deeper/deepest.txt:file", "/a/inner.txt:file", "/b.txt:file", "/loop:symlink", "/pipe:fifo"}
	if got := paths(r); !equal(got, want) {
		t.Fatalf("depth 10: %v, want %v (the symlink is not followed)", got, want)
	}
	r, err = List(context.Background(), nil, ListRequest{Path: root, Depth: 3, MaxEntries: 2, ExcludeDirs: []string{".git"}})
	if err != nil || !r.Truncated || !equal(paths(r), want[:2]) {
		t.Fatalf("max_entries 2: %v %v %v", paths(r), r.Truncated, err)
	}
	r, err = List(context.Background(), nil, ListRequest{Path: filepath.Join(root, "a", "deeper"), MaxEntries: 1})
	if err != nil || r.Truncated || len(r.Entries) != 1 {
		t.Fatalf("exactly max_entries is not truncated: %+v %v", r, err)
	}
	if _, err := List(context.Background(), nil, ListRequest{Path: filepath.Join(root, "b.txt")}); codeOf(err) != errcode.InvalidArgument {
		t.Fatalf("a file: %v", err)
	}
	if _, err := List(context.Background(), nil, ListRequest{Path: filepath.Join(root, "nope")}); codeOf(err) != errcode.NotFound {
		t.Fatalf("missing: %v", err)
	}
	for _, bad := range []ListRequest{{Path: root, Depth: 11}, {Path: root, MaxEntries: 10001}, {Path: root, ExcludeDirs: []string{"a/b"}}, {Path: "rel"}} {
		if _, err := List(context.Background(), nil, bad); codeOf(err) != errcode.InvalidArgument {
			t.Errorf("%+v: %v, want invalid_argument", bad, err)
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestOwnDirsAreRefused: every tool refuses the agent's own directories,
// by any path: straight, through "..", through a symlink, and by a file
// that does not exist yet; a listing above them leaves them out.
func TestOwnDirsAreRefused(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	own, err := owndirs.New(state)
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(state, "identity.json")
	writeFile(t, secret, "secret", 0o600)
	writeFile(t, filepath.Join(base, "other", "f"), "x", 0o600)
	if err := os.Symlink(state, filepath.Join(base, "other", "link")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range []string{
		secret,
		filepath.Join(base, "other", "..", "state", "identity.json"),
		filepath.Join(base, "other", "link", "identity.json"),
		filepath.Join(state, "new.txt"),
	} {
		_, rerr := Read(ctx, own, ReadRequest{Path: p})
		_, werr := Write(own, WriteRequest{Path: p, Content: "x", Mode: "overwrite", MakeDirs: true})
		_, eerr := EditFile(context.Background(), own, EditRequest{Path: p, Edits: []Edit{{OldText: "secret", NewText: "x"}}})
		_, lerr := List(ctx, own, ListRequest{Path: filepath.Dir(p)})
		for tool, err := range map[string]error{"read": rerr, "write": werr, "edit": eerr, "list": lerr} {
			if codeOf(err) != errcode.PermissionDenied {
				t.Errorf("%s %s: %v, want permission_denied", tool, p, err)
			}
		}
	}
	if _, err := Write(own, WriteRequest{Path: filepath.Join(state, "sub", "f"), Content: "x", MakeDirs: true}); codeOf(err) != errcode.PermissionDenied {
		t.Errorf("make_dirs inside: %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, "sub")); !os.IsNotExist(err) {
		t.Error("make_dirs created a directory inside the agent's own")
	}
	if got, _ := os.ReadFile(secret); string(got) != "secret" {
		t.Fatalf("the agent's file changed: %q", got)
	}
	r, err := List(ctx, own, ListRequest{Path: base, Depth: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range r.Entries {
		if e.Path == state || filepath.Dir(e.Path) == state {
			t.Errorf("listed %s", e.Path)
		}
	}
}
