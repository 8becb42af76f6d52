package owndirs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

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

// TestLinksFindsTheOwnFilesOtherNames: a hard link made elsewhere to a
// file of the agent's own directories is recognised as that file; another
// file with several links, and any file with one, is not.
func TestLinksFindsTheOwnFilesOtherNames(t *testing.T) {
	base := t.TempDir()
	config := filepath.Join(base, "config")
	state := filepath.Join(base, "state")
	s, err := New(config, state)
	if err != nil {
		t.Fatal(err)
	}
	identity := filepath.Join(config, "identity.json")
	deep := filepath.Join(state, "jobs", "j", "stdout.cap")
	os.MkdirAll(filepath.Dir(deep), 0o700)
	for _, f := range []string{identity, deep, filepath.Join(base, "plain"), filepath.Join(base, "twice")} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink(filepath.Join(base, "twice"), filepath.Join(state, "link-out"))
	for _, l := range [][2]string{{identity, "id-link"}, {deep, "cap-link"}, {filepath.Join(base, "twice"), "twice-link"}} {
		if err := os.Link(l[0], filepath.Join(base, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	stat := func(p string) *unix.Stat_t {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return &st
	}
	links := s.Links()
	for name, want := range map[string]bool{"id-link": true, "cap-link": true, "twice-link": false, "plain": false} {
		if got := links.Own(stat(filepath.Join(base, name))); got != want {
			t.Errorf("%s: own %v, want %v", name, got, want)
		}
	}
	if links.Own(stat(config)) {
		t.Error("a directory is taken for a file")
	}
	var nilLinks *Links
	if nilLinks.Own(stat(filepath.Join(base, "id-link"))) || (&Set{}).Links().Own(stat(filepath.Join(base, "id-link"))) {
		t.Error("an empty set protects something")
	}
	// A link made after the walk is not seen by that call's memory, but by
	// the next call's.
	late := filepath.Join(config, "late")
	os.WriteFile(late, []byte("x"), 0o600)
	os.Link(late, filepath.Join(base, "late-link"))
	if !s.Links().Own(stat(filepath.Join(base, "late-link"))) {
		t.Error("a new call does not see a new link")
	}
}

// TestLinksRefusesWhatItCannotWalk: when the own directories are more
// than the walk's bound, a file with several links counts as theirs.
func TestLinksRefusesWhatItCannotWalk(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	s, err := New(state)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(base, "f")
	os.WriteFile(f, []byte("x"), 0o600)
	os.Link(f, filepath.Join(base, "g"))
	var st unix.Stat_t
	unix.Stat(f, &st)
	os.Remove(state)
	if !s.Links().Own(&st) {
		t.Error("a file with several links passes while the own directories cannot be walked")
	}
}
