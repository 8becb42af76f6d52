package eintr

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenAndReadPassResultsThrough: what the calls return when no signal
// interrupts them is what the system calls return: the descriptor and the
// bytes, or the error itself.
func TestOpenAndReadPassResultsThrough(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	dfd, err := Openat(unix.AT_FDCWD, dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	fd, err := Openat(dfd, "f", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 16)
	if n, err := Read(fd, buf); err != nil || string(buf[:n]) != "content" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if n, err := Read(fd, buf); err != nil || n != 0 {
		t.Fatalf("read at the end: %d, %v", n, err)
	}
	if _, err := Openat(dfd, "missing", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != unix.ENOENT {
		t.Fatalf("open of a missing file: %v", err)
	}
	if _, err := Read(-1, buf); err != unix.EBADF {
		t.Fatalf("read of no descriptor: %v", err)
	}
	created, err := Openat(dfd, "new", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(created)
	if fi, err := os.Stat(filepath.Join(dir, "new")); err != nil || fi.Mode().Perm() != 0o640&^umask() {
		t.Fatalf("created %v, %v", fi.Mode(), err)
	}
}

func umask() os.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return os.FileMode(m)
}

// TestPollPassesResultsThrough: a pipe with bytes in it is readable, an
// empty one is not, and a closed descriptor is reported, not waited on.
func TestPollPassesResultsThrough(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	fds := []unix.PollFd{{Fd: int32(p[0]), Events: unix.POLLIN}}
	if n, err := Poll(fds, 0); err != nil || n != 0 {
		t.Fatalf("poll of an empty pipe: %d, %v", n, err)
	}
	if _, err := unix.Write(p[1], []byte("x")); err != nil {
		t.Fatal(err)
	}
	if n, err := Poll(fds, 0); err != nil || n != 1 || fds[0].Revents&unix.POLLIN == 0 {
		t.Fatalf("poll of a pipe with a byte: %d %#x, %v", n, fds[0].Revents, err)
	}
	bad := []unix.PollFd{{Fd: 1 << 20, Events: unix.POLLIN}}
	if n, err := Poll(bad, 0); err != nil || n != 1 || bad[0].Revents&unix.POLLNVAL == 0 {
		t.Fatalf("poll of no descriptor: %d %#x, %v", n, bad[0].Revents, err)
	}
}
