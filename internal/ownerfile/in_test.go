package ownerfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// jobDir returns a fresh directory, opened with OpenDir.
func jobDir(t *testing.T) (string, *os.File) {
	t.Helper()
	p := t.TempDir()
	d, err := OpenDir(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return p, d
}

// openIn is OpenIn that fails the test if it blocks.
func openIn(t *testing.T, dir *os.File, name string) (*os.File, error) {
	t.Helper()
	type res struct {
		f   *os.File
		err error
	}
	done := make(chan res, 1)
	go func() { f, err := OpenIn(dir, name, SharedWrite); done <- res{f, err} }()
	select {
	case r := <-done:
		return r.f, r.err
	case <-time.After(5 * time.Second):
		t.Fatal("OpenIn blocked")
		return nil, nil
	}
}

// wantRefusedIn checks that both OpenIn and ReadIn refuse name in dir
// with reason, naming no path.
func wantRefusedIn(t *testing.T, what string, dir *os.File, name, reason string) {
	t.Helper()
	f, err := openIn(t, dir, name)
	var e *Error
	if !errors.As(err, &e) || errors.Is(err, os.ErrNotExist) || f != nil {
		t.Fatalf("%s: OpenIn gave %v, %v; want a refusal", what, f, err)
	}
	if e.Reason != reason || strings.Contains(err.Error(), "/") {
		t.Errorf("%s: OpenIn refused with %q, want %q", what, e.Reason, reason)
	}
	data, err := ReadIn(dir, name, bound, SharedWrite)
	if !errors.As(err, &e) || data != nil || e.Reason != reason {
		t.Errorf("%s: ReadIn gave %q, %v; want %q", what, data, err, reason)
	}
}

func TestOpenInReadsAnOwnRegularFile(t *testing.T) {
	p, d := jobDir(t)
	if err := os.WriteFile(filepath.Join(p, "stdout.cap"), []byte("own"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := openIn(t, d, "stdout.cap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, err := io.ReadAll(f); err != nil || string(b) != "own" {
		t.Fatalf("read %q %v", b, err)
	}
	if b, err := ReadIn(d, "stdout.cap", bound, SharedWrite); err != nil || string(b) != "own" {
		t.Fatalf("ReadIn %q %v", b, err)
	}
	if _, err := ReadIn(d, "stdout.cap", 2, SharedWrite); err == nil || err.Error() != "it is larger than 2 bytes" {
		t.Fatalf("ReadIn over its bound: %v", err)
	}
}

func TestOpenInMissingIsNotExist(t *testing.T) {
	_, d := jobDir(t)
	if _, err := openIn(t, d, "stdout.cap"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenIn: %v, want os.ErrNotExist", err)
	}
	if _, err := ReadIn(d, "stdout.cap", bound, SharedWrite); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadIn: %v, want os.ErrNotExist", err)
	}
}

// A job can replace a file of its directory with a link to another job's:
// the link is refused, never followed, whether or not its target exists.
func TestOpenInRefusesASymlink(t *testing.T) {
	other, _ := jobDir(t)
	target := filepath.Join(other, "stdout.cap")
	if err := os.WriteFile(target, []byte("someone else's"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, d := jobDir(t)
	if err := os.Symlink(target, filepath.Join(p, "stdout.cap")); err != nil {
		t.Fatal(err)
	}
	wantRefusedIn(t, "symlink", d, "stdout.cap", "it is a symbolic link")
	if err := os.Symlink(filepath.Join(other, "nowhere"), filepath.Join(p, "result.json")); err != nil {
		t.Fatal(err)
	}
	wantRefusedIn(t, "dangling symlink", d, "result.json", "it is a symbolic link")
}

func TestOpenInRefusesAFIFOAtOnce(t *testing.T) {
	p, d := jobDir(t)
	if err := syscall.Mkfifo(filepath.Join(p, "stdout.cap"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantRefusedIn(t, "FIFO", d, "stdout.cap", "it is not a regular file")
}

func TestOpenInRefusesADirectory(t *testing.T) {
	p, d := jobDir(t)
	if err := os.Mkdir(filepath.Join(p, "stdout.cap"), 0o700); err != nil {
		t.Fatal(err)
	}
	wantRefusedIn(t, "directory", d, "stdout.cap", "it is not a regular file")
}

func TestOpenInRefusesAnotherUsersFile(t *testing.T) {
	p, d := jobDir(t)
	name := filepath.Join(p, "stdout.cap")
	if err := os.WriteFile(name, []byte("nobody's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(name, 65534, 65534); err != nil {
		t.Skipf("cannot chown here (not root): %v", err)
	}
	wantRefusedIn(t, "owned by nobody", d, "stdout.cap", "it is not owned by the agent's user")
}

func TestOpenInRefusesSharedWrite(t *testing.T) {
	p, d := jobDir(t)
	name := filepath.Join(p, "result.json")
	if err := os.WriteFile(name, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(name, 0o622); err != nil {
		t.Fatal(err)
	}
	wantRefusedIn(t, "0622 file", d, "result.json", "it is writable by group or others")
}

// Only one component is opened relative to the directory: a name that
// walks anywhere is refused before anything is opened.
func TestOpenInRefusesANameThatIsNotOneComponent(t *testing.T) {
	p, d := jobDir(t)
	if err := os.Mkdir(filepath.Join(p, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "sub", "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sub/f", "", ".", "..", "/etc/passwd", "../x"} {
		wantRefusedIn(t, "name "+name, d, name, "its name is not one path component")
	}
}

func TestOpenDir(t *testing.T) {
	p := t.TempDir()
	d, err := OpenDir(p)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := OpenDir(filepath.Join(p, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v, want os.ErrNotExist", err)
	}
	wantDirRefused := func(what, path, reason string) {
		t.Helper()
		d, err := OpenDir(path)
		var e *Error
		if !errors.As(err, &e) || errors.Is(err, os.ErrNotExist) || d != nil || e.Reason != reason {
			t.Fatalf("%s: %v, %v; want %q", what, d, err, reason)
		}
		if strings.Contains(err.Error(), "/") {
			t.Errorf("%s: the refusal names a path: %v", what, err)
		}
	}
	link := filepath.Join(t.TempDir(), "job")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	wantDirRefused("a link to a directory", link, "it is a symbolic link or not a directory")
	file := filepath.Join(p, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantDirRefused("a file", file, "it is a symbolic link or not a directory")
	nobodys := filepath.Join(p, "nobody")
	if err := os.Mkdir(nobodys, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(nobodys, 65534, 65534); err != nil {
		t.Skipf("cannot chown here (not root): %v", err)
	}
	wantDirRefused("another user's directory", nobodys, "it is not owned by the agent's user")
}
