package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/commandcore/commandcore/internal/atomicfile"
)

// TestWriteReplaces: an existing file is replaced whole, with the mode
// asked for (not the old file's, not the umask's), and no temporary file
// is left behind.
func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "unit.service")
	if err := os.WriteFile(path, []byte("old content, longer than the new"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, perm := range []os.FileMode{0o644, 0o600} {
		if err := atomicfile.Write(path, []byte("new"), perm); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != "new" {
			t.Fatalf("content %q (%v), want %q", got, err, "new")
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != perm || !fi.Mode().IsRegular() {
			t.Errorf("mode %v, want regular %v", fi.Mode(), perm)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Errorf("directory holds %v, want only the file", entries)
		}
	}
}

// TestWriteMissingDirectory: without the directory nothing is written and
// the error says so.
func TestWriteMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent", "f")
	if err := atomicfile.Write(path, []byte("x"), 0o600); err == nil {
		t.Fatal("Write into a missing directory succeeded")
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Errorf("the directory was created: %v", err)
	}
}

// TestWriteKeepsOldOnFailure: a rename that cannot happen (the target is a
// non-empty directory) leaves the target as it was and no temporary file.
func TestWriteKeepsOldOnFailure(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.MkdirAll(filepath.Join(target, "inside"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(target, []byte("x"), 0o600); err == nil {
		t.Fatal("Write over a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "target" || !entries[0].IsDir() {
		t.Errorf("directory holds %v, want only the untouched target", entries)
	}
}
