package atomicfile_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/testkit"
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

func openDir(t *testing.T, dir string) *os.File {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestExclusiveRefusesAnExistingFile: an exclusive write creates a missing
// file, and over an existing one fails with fs.ErrExist, leaving it and
// no temporary file.
func TestExclusiveRefusesAnExistingFile(t *testing.T) {
	dir := t.TempDir()
	d := openDir(t, dir)
	if err := atomicfile.WriteAt(d, "f", []byte("first"), atomicfile.Options{Exclusive: true}); err != nil {
		t.Fatal(err)
	}
	err := atomicfile.WriteAt(d, "f", []byte("second"), atomicfile.Options{Exclusive: true})
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("exclusive write over an existing file: %v, want fs.ErrExist", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "f")); string(got) != "first" {
		t.Fatalf("the existing file now holds %q", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %v, want only the file", entries)
	}
}

// TestZeroPermFollowsTheUmask: without a mode the new file is what the
// umask makes of 0666, like any file a program creates.
func TestZeroPermFollowsTheUmask(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	dir := t.TempDir()
	if err := atomicfile.WriteAt(openDir(t, dir), "f", []byte("x"), atomicfile.Options{}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "f"))
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v (%v), want 0640", fi.Mode(), err)
	}
}

// TestLikeKeepsOwnerModeAndAttributes: a replacement Like a file has its
// owner (as root, nobody's; otherwise this user's own), its whole mode,
// set-id bits and no bits at all included, and its extended attributes
// and ACL; Perm is not used then.
func TestLikeKeepsOwnerModeAndAttributes(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 65534, 65534
	}
	acl := testkit.AccessACL(4242)
	for _, mode := range []uint32{0o4755, 0o2710, 0o1600, 0} {
		dir := t.TempDir()
		old := filepath.Join(dir, "f")
		if err := os.WriteFile(old, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(old, "user.origin", []byte("kept"), 0); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(old, "system.posix_acl_access", acl, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(old, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(old, mode); err != nil {
			t.Fatal(err)
		}
		var want unix.Stat_t
		if err := unix.Stat(old, &want); err != nil {
			t.Fatal(err)
		}
		wantACL := testkit.Xattr(t, old, "system.posix_acl_access")
		fd, err := unix.Open(old, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		like := os.NewFile(uintptr(fd), "like")
		err = atomicfile.WriteAt(openDir(t, dir), "f", []byte("new"), atomicfile.Options{Perm: 0o644, Like: like})
		like.Close()
		if err != nil {
			t.Fatalf("mode %04o: %v", mode, err)
		}
		var got unix.Stat_t
		if err := unix.Stat(old, &got); err != nil {
			t.Fatal(err)
		}
		if got.Ino == want.Ino {
			t.Fatalf("mode %04o: the file was not replaced", mode)
		}
		if got.Mode != want.Mode || got.Uid != want.Uid || got.Gid != want.Gid {
			t.Errorf("mode %04o: replacement is %o %d:%d, want %o %d:%d", mode, got.Mode, got.Uid, got.Gid, want.Mode, want.Uid, want.Gid)
		}
		if v := testkit.Xattr(t, old, "user.origin"); string(v) != "kept" {
			t.Errorf("mode %04o: user.origin = %q, want kept", mode, v)
		}
		if v := testkit.Xattr(t, old, "system.posix_acl_access"); !bytes.Equal(v, wantACL) {
			t.Errorf("mode %04o: ACL = %x, want %x", mode, v, wantACL)
		}
		if b, _ := os.ReadFile(old); string(b) != "new" {
			t.Errorf("mode %04o: content %q", mode, b)
		}
	}
}

// TestLongNameHasATemporaryName: a 255-byte name, the longest Linux
// allows, is written too.
func TestLongNameHasATemporaryName(t *testing.T) {
	dir := t.TempDir()
	name := strings.Repeat("n", 255)
	if err := atomicfile.Write(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
}
