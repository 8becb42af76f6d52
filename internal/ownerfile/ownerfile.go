// Package ownerfile reads the small files only the agent's user may have
// written: identity.json, permissions.json and job-resources.json. It is
// the one way to read them: without following a symbolic link, without
// blocking (a FIFO in a file's place answers at once), and only a regular
// file owned by the effective user that group and others cannot write,
// bounded in size. Refusals name the problem, never the path or content.
package ownerfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
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

// Read returns the content of path, at most maxBytes. A missing file is an
// error matching os.ErrNotExist; anything else wrong with it is an *Error.
// deny adds permission bits (Private) to the SharedWrite always refused.
func Read(path string, maxBytes int64, deny os.FileMode) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		cause := err
		var pe *os.PathError
		if errors.As(err, &pe) {
			// The bare errno: a PathError would carry the path.
			cause = pe.Err
		}
		switch {
		case errors.Is(cause, syscall.ENOENT):
			return nil, &Error{Reason: "it does not exist", Err: cause}
		case errors.Is(cause, syscall.ELOOP):
			return nil, &Error{Reason: "it is a symbolic link", Err: cause}
		}
		return nil, &Error{Reason: "it cannot be opened", Err: cause}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, &Error{Reason: "it cannot be inspected", Err: err}
	}
	if err := check(fi, os.Geteuid(), maxBytes, deny); err != nil {
		return nil, err
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
func check(fi os.FileInfo, uid int, maxBytes int64, deny os.FileMode) error {
	if !fi.Mode().IsRegular() {
		return &Error{Reason: "it is not a regular file"}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != uid {
		return &Error{Reason: "it is not owned by the agent's user"}
	}
	if deny |= SharedWrite; fi.Mode().Perm()&deny != 0 {
		if deny&^SharedWrite != 0 {
			return &Error{Reason: "it is accessible by other users"}
		}
		return &Error{Reason: "it is writable by group or others"}
	}
	if fi.Size() > maxBytes {
		return tooLarge(maxBytes)
	}
	return nil
}

func tooLarge(maxBytes int64) error {
	return &Error{Reason: fmt.Sprintf("it is larger than %d bytes", maxBytes)}
}
