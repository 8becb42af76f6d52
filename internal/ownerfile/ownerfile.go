// Package ownerfile reads the small files only the agent's user may have
// written: identity.json, permissions.json and job-resources.json, and
// every file of a job directory the agent reads for a caller. It is the one
// way to read them: without following a symbolic link, without blocking (a
// FIFO in a file's place answers at once), and only a regular file owned by
// the effective user that group and others cannot write, bounded in size.
// Refusals name the problem, never the path or content.
package ownerfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/eintr"
)

// Permission bits a caller refuses. Write by group or others is always
// refused: such a file may not be the owner's word.
const (
	// SharedWrite refuses a file group or others may write.
	SharedWrite os.FileMode = 0o022
	// Private also refuses a file group or others may read or execute, for
	// secrets and for files that say what a stolen credential could do.
	Private os.FileMode = 0o077
)

// Error is why an existing file is refused. Its message is one of a fixed
// set of phrases ("it is a symbolic link"); Err is the system's cause, for
// local diagnosis.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Reason }
func (e *Error) Unwrap() error { return e.Err }

// openFlags never follow a link in the last component and never wait for
// a FIFO's writer.
const openFlags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

// Read returns the content of path, at most maxBytes. A missing file is an
// error matching os.ErrNotExist; anything else wrong with it is an *Error.
// deny adds permission bits (Private) to the SharedWrite always refused.
func Read(path string, maxBytes int64, deny os.FileMode) ([]byte, error) {
	f, err := openAt(unix.AT_FDCWD, path, deny)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f, maxBytes)
}

// ReadIn is Read of name inside the open directory dir. name is one path
// component, so no link can stand anywhere between dir and the file.
func ReadIn(dir *os.File, name string, maxBytes int64, deny os.FileMode) ([]byte, error) {
	f, err := OpenIn(dir, name, deny)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f, maxBytes)
}

// OpenIn opens name inside the open directory dir under Read's rules but
// the size bound, for a caller that reads the file itself (a capture, read
// a page at a time). name is one path component.
func OpenIn(dir *os.File, name string, deny os.FileMode) (*os.File, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, &Error{Reason: "its name is not one path component"}
	}
	defer runtime.KeepAlive(dir)
	return openAt(int(dir.Fd()), name, deny)
}

// OpenDir opens the directory at path for OpenIn and ReadIn: not through a
// symbolic link in its last component, and only one the effective user
// owns. A missing directory is an error matching os.ErrNotExist.
func OpenDir(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, &Error{Reason: "it does not exist", Err: err}
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		// O_DIRECTORY answers a link with ENOTDIR, before O_NOFOLLOW would.
		return nil, &Error{Reason: "it is a symbolic link or not a directory", Err: err}
	case err != nil:
		return nil, &Error{Reason: "it cannot be opened", Err: err}
	}
	d := os.NewFile(uintptr(fd), "job directory")
	fi, err := d.Stat()
	if err != nil {
		d.Close()
		return nil, &Error{Reason: "it cannot be inspected", Err: err}
	}
	if err := checkOwner(fi, os.Geteuid()); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// openAt opens name relative to dirfd and checks what it opened.
func openAt(dirfd int, name string, deny os.FileMode) (*os.File, error) {
	fd, err := eintr.Openat(dirfd, name, openFlags, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, &Error{Reason: "it does not exist", Err: err}
	case errors.Is(err, unix.ELOOP):
		return nil, &Error{Reason: "it is a symbolic link", Err: err}
	case err != nil:
		return nil, &Error{Reason: "it cannot be opened", Err: err}
	}
	// The name is only for the os package's own messages, never shown.
	f := os.NewFile(uintptr(fd), "owner file")
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, &Error{Reason: "it cannot be inspected", Err: err}
	}
	if err := check(fi, os.Geteuid(), deny); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// readBounded reads an opened file of at most maxBytes.
func readBounded(f *os.File, maxBytes int64) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, &Error{Reason: "it cannot be inspected", Err: err}
	}
	if fi.Size() > maxBytes {
		return nil, tooLarge(maxBytes)
	}
	// The size was checked; the limit also holds for a file that grows.
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, &Error{Reason: "it cannot be read", Err: err}
	}
	if int64(len(data)) > maxBytes {
		return nil, tooLarge(maxBytes)
	}
	return data, nil
}

// check applies the rules to an opened file's metadata.
func check(fi os.FileInfo, uid int, deny os.FileMode) error {
	if !fi.Mode().IsRegular() {
		return &Error{Reason: "it is not a regular file"}
	}
	if err := checkOwner(fi, uid); err != nil {
		return err
	}
	if deny |= SharedWrite; fi.Mode().Perm()&deny != 0 {
		if deny&^SharedWrite != 0 {
			return &Error{Reason: "it is accessible by other users"}
		}
		return &Error{Reason: "it is writable by group or others"}
	}
	return nil
}

func checkOwner(fi os.FileInfo, uid int) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != uid {
		return &Error{Reason: "it is not owned by the agent's user"}
	}
	return nil
}

func tooLarge(maxBytes int64) error {
	return &Error{Reason: fmt.Sprintf("it is larger than %d bytes", maxBytes)}
}
