package owndirs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
)

func TestCheckRefusesEveryWayIn(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	config := filepath.Join(base, "config")
	s, err := New(state, config)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(config); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("config dir not created 0700: %v %v", fi, err)
	}
	os.WriteFile(filepath.Join(config, "identity.json"), []byte("{}"), 0o600)
	os.MkdirAll(filepath.Join(state, "jobs", "j"), 0o700)
	os.Symlink(config, filepath.Join(base, "link-to-config"))
	os.Mkdir(filepath.Join(config, "sub"), 0o700)
	os.Symlink(filepath.Join(config, "sub"), filepath.Join(base, "link-to-sub"))
	os.Symlink(filepath.Join(config, "identity.json"), filepath.Join(base, "link-to-identity"))
	other := filepath.Join(base, "other")
	os.Mkdir(other, 0o700)
	os.Symlink(base, filepath.Join(other, "up"))
	// A bind-mount-like second name: a hard link is impossible for a
	// directory, so rename the directory after New: identity is by inode.
	moved := filepath.Join(base, "moved-state")
	if err := os.Rename(state, moved); err != nil {
		t.Fatal(err)
	}

	for _, p := range []string{
		config,
		config + "/",
		filepath.Join(config, "identity.json"),
		filepath.Join(config, "not-yet", "deeper"),
		filepath.Join(base, "link-to-config", "identity.json"),
		filepath.Join(base, "link-to-identity"),
		filepath.Join(other, "up", "config", "identity.json"),
		filepath.Join(other, "..", "config"),
		// The kernel resolves "link/.." to the link target's parent.
		filepath.Join(base, "link-to-sub") + "/../identity.json",
		filepath.Join(base, "link-to-sub") + "/../not-yet/f",
		moved,
		filepath.Join(moved, "jobs", "j"),
	} {
		if err := s.Check(p); errcode.From(err).Code != errcode.PermissionDenied {
			t.Errorf("Check(%s) = %v, want permission_denied", p, err)
		}
	}
	for _, p := range []string{base, other, filepath.Join(other, "new-file"), "/", filepath.Join(base, "configx")} {
		if err := s.Check(p); err != nil {
			t.Errorf("Check(%s) = %v, want allowed", p, err)
		}
	}
	var nilSet *Set
	if nilSet.Check(config) != nil || nilSet.IsOwn(0) {
		t.Error("a nil set protects nothing")
	}
}

func TestIsOwnByDescriptor(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	s, err := New(state)
	if err != nil {
		t.Fatal(err)
	}
	open := func(p string) int {
		fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Close(fd) })
		return fd
	}
	if !s.IsOwn(open(state)) {
		t.Error("the state dir is not recognised")
	}
	if s.IsOwn(open(base)) {
		t.Error("its parent is taken for it")
	}
}

// TestCheckDirWalksUp: an open directory is refused when it is one of the
// set or lies anywhere beneath one, also after the path that led to it was
// renamed, and allowed elsewhere.
func TestCheckDirWalksUp(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	s, err := New(state)
	if err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(state, "jobs", "j", "k")
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	open := func(p string) int {
		fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Close(fd) })
		return fd
	}
	inside, self := open(deep), open(state)
	// The directory that was reached inside is still inside after a rename
	// of the path that led to it.
	if err := os.Rename(filepath.Join(state, "jobs"), filepath.Join(state, "renamed")); err != nil {
		t.Fatal(err)
	}
	for name, fd := range map[string]int{"deep inside": inside, "the state dir": self} {
		if err := s.CheckDir(fd); errcode.From(err).Code != errcode.PermissionDenied {
			t.Errorf("%s: %v, want permission_denied", name, err)
		}
	}
	for _, p := range []string{base, "/"} {
		if err := s.CheckDir(open(p)); err != nil {
			t.Errorf("%s: %v, want allowed", p, err)
		}
	}
	var nilSet *Set
	if nilSet.CheckDir(inside) != nil {
		t.Error("a nil set protects nothing")
	}
}
