// Package fileops implements files.read, files.write, files.edit and
// files.list (docs/tools.md): whole-file operations a model can trust.
//
// Semantics, in one place:
//
//   - Paths are absolute. Symlinks in a path are followed, once, to the
//     real file; the operation then works on that file inside its real
//     directory, which is held open: every later step (stat, open, the
//     temporary file, the rename) is relative to it, so a path swapped
//     meanwhile cannot redirect it.
//   - The agent's own directories (package owndirs) are refused with
//     permission_denied: by path before anything is touched, and again by
//     the open directory walking up by "..", so neither "..", a symlink nor
//     a rename leads inside.
//   - Only regular files are read or written. A directory, FIFO, socket or
//     device is refused after lstat, never opened; the open itself is
//     O_NOFOLLOW|O_NONBLOCK and fstat must agree, so a file swapped for a
//     FIFO between the two cannot hang the call.
//   - create and overwrite (and every edit) are atomic: a temporary file in
//     the same directory, fsync, rename, fsync of the directory, keeping an
//     existing file's permission bits and owner. append adds to the file in
//     place (O_APPEND), so other writers' descriptors stay valid.
//   - expected_sha256 is checked against the content read in the same call;
//     a writer that changes the file between that read and the rename is not
//     detected (there are no locks).
//   - Errors never name the path or quote content.
package fileops

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/owndirs"
)

// Errors about the file a request names. They are *errcode.Error values
// with content-free messages; compare with errors.Is.
var (
	ErrNotFound    = errcode.New(errcode.NotFound, "the file or a directory on its path does not exist")
	ErrIsDirectory = errcode.New(errcode.InvalidArgument, "the path is a directory (files.list lists one)")
	ErrNotRegular  = errcode.New(errcode.InvalidArgument, "the path is not a regular file but a FIFO, socket or device, which is never opened")
	ErrPermission  = errcode.New(errcode.PermissionDenied, "the file or its directory is not accessible to the agent's user")
	ErrConflict    = errcode.New(errcode.Conflict, "the file's content does not match expected_sha256; read it again")
)

func invalid(format string, args ...any) error {
	return errcode.New(errcode.InvalidArgument, format, args...)
}

// checkPath validates a request's path without touching the file system.
func checkPath(p string) error {
	switch {
	case p == "":
		return invalid("path is required")
	case strings.IndexByte(p, 0) >= 0:
		return invalid("path must not contain NUL bytes")
	case !filepath.IsAbs(p):
		return invalid("path must be an absolute path")
	}
	return nil
}

// checkSHA validates an expected_sha256 and returns it in lower case.
func checkSHA(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	s = strings.ToLower(s)
	if b, err := hex.DecodeString(s); err != nil || len(b) != sha256.Size {
		return "", invalid("expected_sha256 must be 64 hexadecimal digits")
	}
	return s, nil
}

// fsError turns a file system error into a content-free coded error.
func fsError(err error, what string) error {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return ErrNotFound
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return ErrPermission
	case errors.Is(err, unix.ELOOP):
		return invalid("the path has too many levels of symbolic links")
	case errors.Is(err, unix.ENAMETOOLONG):
		return invalid("the path or one of its names is too long")
	case errors.Is(err, unix.EISDIR):
		return ErrIsDirectory
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return errcode.Wrap(errcode.Internal, err, "no space left to %s the file", what)
	case errors.Is(err, unix.EROFS):
		return errcode.Wrap(errcode.PermissionDenied, err, "the file system is read-only")
	}
	return errcode.Wrap(errcode.Internal, err, "cannot %s the file", what)
}

// target is the file a request names, resolved: its real directory, open
// and checked to be outside the agent's own, and its name there.
type target struct {
	dir  *os.File
	name string
}

func (t *target) close() { t.dir.Close() }

func (t *target) dfd() int { return int(t.dir.Fd()) }

// openTarget resolves path. A missing file is allowed when mayBeMissing
// (its directory must exist); what is not there yet is judged by the
// directory it would be created in.
func openTarget(own *owndirs.Set, path string, mayBeMissing bool) (*target, error) {
	if err := own.Check(path); err != nil {
		return nil, err
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil && mayBeMissing && errors.Is(err, os.ErrNotExist) {
		var dir string
		if dir, err = filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
			resolved = filepath.Join(dir, filepath.Base(path))
		}
	}
	if err != nil {
		return nil, fsError(err, "find")
	}
	if resolved == "/" {
		return nil, ErrIsDirectory
	}
	fd, err := openRetry(unix.AT_FDCWD, filepath.Dir(resolved), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return nil, fsError(err, "find")
	}
	dir := os.NewFile(uintptr(fd), filepath.Dir(resolved))
	if err := own.CheckDir(fd); err != nil {
		dir.Close()
		return nil, err
	}
	return &target{dir: dir, name: filepath.Base(resolved)}, nil
}

func openRetry(dfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dfd, name, flags, 0o666)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// kindError refuses anything but a regular file.
func kindError(mode uint32) error {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFDIR:
		return ErrIsDirectory
	}
	return ErrNotRegular
}

// lstat examines the target without following or opening it; ok is false
// when it does not exist.
func (t *target) lstat() (st unix.Stat_t, ok bool, err error) {
	err = unix.Fstatat(t.dfd(), t.name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fsError(err, "examine")
	}
	return st, true, nil
}

// openExisting opens the target, which must exist and be a regular file,
// and returns it with its stat. A file replaced between the lstat and the
// open (an atomic overwrite by someone else) is looked up again, a few
// times, rather than answered with conflict.
func (t *target) openExisting(flags int) (*os.File, unix.Stat_t, error) {
	for attempt := 0; ; attempt++ {
		st, ok, err := t.lstat()
		if err != nil {
			return nil, st, err
		}
		if !ok {
			return nil, st, ErrNotFound
		}
		f, err := t.openRegular(st, flags)
		if errcode.Is(err, errcode.Conflict) && attempt < replacedRetries {
			continue
		}
		return f, st, err
	}
}

// replacedRetries is how often openExisting looks a replaced file up again.
const replacedRetries = 3

// openRegular opens the target, which lstat found to be the regular file
// st, with flags; fstat must find the same file.
func (t *target) openRegular(st unix.Stat_t, flags int) (*os.File, error) {
	if err := kindError(st.Mode); err != nil {
		return nil, err
	}
	fd, err := openRetry(t.dfd(), t.name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return nil, fsError(err, "open")
	}
	var got unix.Stat_t
	if err := unix.Fstat(fd, &got); err != nil {
		unix.Close(fd)
		return nil, fsError(err, "examine")
	}
	if err := kindError(got.Mode); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if got.Dev != st.Dev || got.Ino != st.Ino {
		unix.Close(fd)
		return nil, errcode.New(errcode.Conflict, "the file was replaced while it was opened; try again")
	}
	return os.NewFile(uintptr(fd), t.name), nil
}

// hashFrom returns the SHA-256 (hex) and length of what r holds from its
// current position on.
func hashFrom(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func mtime(st unix.Stat_t) time.Time {
	return time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC()
}
