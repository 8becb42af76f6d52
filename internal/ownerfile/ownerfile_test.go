package ownerfile

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const bound = 64 << 10

// file writes content at a fresh path with mode and returns the path.
func file(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "owner.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// read reads path and fails the test if that takes more than a few seconds.
func read(t *testing.T, path string, maxBytes int64, deny os.FileMode) ([]byte, error) {
	t.Helper()
	type res struct {
		data []byte
		err  error
	}
	done := make(chan res, 1)
	go func() { d, err := Read(path, maxBytes, deny); done <- res{d, err} }()
	select {
	case r := <-done:
		return r.data, r.err
	case <-time.After(5 * time.Second):
		t.Fatal("Read blocked")
		return nil, nil
	}
}

func wantRefused(t *testing.T, what, path string, deny os.FileMode, reason string) {
	t.Helper()
	data, err := read(t, path, bound, deny)
	var e *Error
	if !errors.As(err, &e) || errors.Is(err, os.ErrNotExist) || data != nil {
		t.Fatalf("%s: %q, %v; want a refusal", what, data, err)
	}
	if !strings.Contains(e.Reason, reason) || e.Error() != e.Reason {
		t.Errorf("%s: refused with %q, want %q", what, e.Reason, reason)
	}
	if strings.Contains(err.Error(), filepath.Dir(path)) {
		t.Errorf("%s: the refusal names the path: %v", what, err)
	}
}

func TestRegularOwnFile(t *testing.T) {
	data, err := read(t, file(t, `{"a":1}`, 0o600), bound, Private)
	if err != nil || string(data) != `{"a":1}` {
		t.Fatalf("%q %v", data, err)
	}
	// Readable by others is fine unless the caller refuses it.
	if _, err := read(t, file(t, `{}`, 0o644), bound, SharedWrite); err != nil {
		t.Fatalf("a 0644 file with SharedWrite: %v", err)
	}
	wantRefused(t, "a 0644 file with Private", file(t, `{}`, 0o644), Private, "accessible by other users")
}

func TestMissingIsNotExist(t *testing.T) {
	_, err := read(t, filepath.Join(t.TempDir(), "absent.json"), bound, Private)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v, want os.ErrNotExist", err)
	}
}

func TestSharedWriteRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o620, 0o602, 0o660, 0o666} {
		wantRefused(t, mode.String()+" with SharedWrite", file(t, `{}`, mode), SharedWrite, "writable by group or others")
		wantRefused(t, mode.String()+" with Private", file(t, `{}`, mode), Private, "accessible by other users")
	}
}

func TestSymlinkRefused(t *testing.T) {
	target := file(t, `{}`, 0o600)
	link := filepath.Join(t.TempDir(), "owner.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "symlink", link, Private, "symbolic link")
	// A dangling link is not an absent file.
	dangling := filepath.Join(t.TempDir(), "owner.json")
	if err := os.Symlink(filepath.Join(t.TempDir(), "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "dangling symlink", dangling, Private, "symbolic link")
}

func TestFIFORefusedAtOnce(t *testing.T) {
	p := filepath.Join(t.TempDir(), "owner.json")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "FIFO", p, SharedWrite, "not a regular file")
}

func TestDirectoryRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "owner.json")
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "directory", p, SharedWrite, "not a regular file")
}

func TestSocketRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "owner.json")
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Opening a socket fails (ENXIO) before anything can be inspected.
	wantRefused(t, "socket", p, SharedWrite, "cannot be opened")
}

func TestDeviceRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "owner.json")
	// The null device, 1:3.
	if err := syscall.Mknod(p, syscall.S_IFCHR|0o600, 1<<8|3); err != nil {
		t.Skipf("cannot create a device node here (not root): %v", err)
	}
	// On a nodev mount the open itself fails; elsewhere fstat says device.
	data, err := read(t, p, bound, SharedWrite)
	var e *Error
	if !errors.As(err, &e) || data != nil || (e.Reason != "it is not a regular file" && e.Reason != "it cannot be opened") {
		t.Fatalf("device: %q %v", data, err)
	}
}

func TestSizeBounded(t *testing.T) {
	if _, err := read(t, file(t, strings.Repeat(" ", bound), 0o600), bound, Private); err != nil {
		t.Fatalf("a file of exactly the bound: %v", err)
	}
	wantRefused(t, "one byte over", file(t, strings.Repeat(" ", bound+1), 0o600), Private, "larger than 65536 bytes")
	// A 1 GiB sparse file is refused from its size, without reading it.
	huge := file(t, "", 0o600)
	if err := os.Truncate(huge, 1<<30); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	wantRefused(t, "1 GiB sparse file", huge, Private, "larger than")
	if d := time.Since(began); d > time.Second {
		t.Errorf("refusing a 1 GiB file took %v", d)
	}
}

func TestNotOwnedRefused(t *testing.T) {
	fi, err := os.Stat(file(t, `{}`, 0o600))
	if err != nil {
		t.Fatal(err)
	}
	if err := check(fi, os.Geteuid()+1, Private); err == nil || err.Error() != "it is not owned by the agent's user" {
		t.Fatalf("a file of another user: %v", err)
	}
	p := file(t, `{}`, 0o600)
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Skipf("cannot chown here (not root): %v", err)
	}
	wantRefused(t, "owned by nobody", p, SharedWrite, "not owned by the agent's user")
}
