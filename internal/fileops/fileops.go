// Package fileops implements files.read, files.write, files.edit and
// files.list (docs/tools.md): whole-file operations a model can trust.
//
// Semantics, in one place:
//
//   - Paths are absolute. Symlinks in a path are followed to the real file
//     (package toolpath resolves the path one name at a time through open
//     directories, as the kernel would); the operation then works on that
//     file inside its real directory, which is held open: every later step
//     (stat, open, the temporary file, the rename) is relative to it, so a
//     path swapped meanwhile cannot redirect it. make_dirs creates each
//     missing directory only in one already judged.
//   - Refused with permission_denied, wherever the path leads through: the
//     agent's own directories (package owndirs), a file of theirs under
//     another name (a hard link), and every per-process file under /proc
//     (environ, cmdline, mem, root, cwd, fd, ... of any PID, self included).
//     files.list lists /proc's process directories without entering them.
//   - Only regular files are read or written. A directory, FIFO, socket or
//     device is refused after lstat, never opened; the open itself is
//     O_NOFOLLOW|O_NONBLOCK and fstat must agree, so a file swapped for a
//     FIFO between the two cannot hang the call.
//   - create and overwrite (and every edit) are atomic: a temporary file in
//     the same directory, fsync, rename, fsync of the directory, keeping an
//     existing file's whole mode, owner and extended attributes (ACLs
//     included). append adds to the file in place (O_APPEND), so other
//     writers' descriptors stay valid.
//   - No call reads without bound: a file over FileHashMaxBytes is not
//     hashed (sha256 null, sha256_skipped says why) and files.read reads
//     only its window; files.edit's search for the nearest text stops after
//     FileEditNearMatchSteps comparisons and with the request.
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

	"github.com/commandcore/commandcore/internal/eintr"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/owndirs"
	"github.com/commandcore/commandcore/internal/toolpath"
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

var errReplaced = errcode.New(errcode.Conflict, "the file was replaced while it was opened; try again")

// fsError turns a file system error into a content-free coded error; one
// that is coded already (a refusal) is kept.
func fsError(err error, what string) error {
	var coded *errcode.Error
	switch {
	case errors.As(err, &coded):
		return err
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
// and checked on the way to be reachable (package toolpath), and its name
// there, never a symlink.
type target struct {
	dir  *os.File
	name string
	// links answers whether a file is one of the agent's own under
	// another name.
	links *owndirs.Links
}

func (t *target) close() { t.dir.Close() }

func (t *target) dfd() int { return int(t.dir.Fd()) }

// openTarget resolves path; what it names need not exist, its directory
// must unless makeDirs creates it.
func openTarget(own *owndirs.Set, path string, makeDirs bool) (*target, error) {
	dir, name, err := toolpath.Parent(own, path, makeDirs)
	if err != nil {
		return nil, fsError(err, "find")
	}
	if name == "." {
		dir.Close()
		return nil, ErrIsDirectory
	}
	return &target{dir: dir, name: name, links: own.Links()}, nil
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
// st, with flags, to read or write it: fstat must find the same regular
// file, and not one of the agent's own under another name.
func (t *target) openRegular(st unix.Stat_t, flags int) (*os.File, error) {
	if err := kindError(st.Mode); err != nil {
		return nil, err
	}
	f, got, err := t.openSame(st, flags|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	if err := kindError(got.Mode); err != nil {
		f.Close()
		return nil, err
	}
	if t.links.Own(&got) {
		f.Close()
		return nil, owndirs.ErrInside
	}
	return f, nil
}

// openSame opens the target with flags, never following a symlink, and
// returns it with its fstat, which must find the file st: a file replaced
// meanwhile is a conflict.
func (t *target) openSame(st unix.Stat_t, flags int) (*os.File, unix.Stat_t, error) {
	var got unix.Stat_t
	fd, err := eintr.Openat(t.dfd(), t.name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, got, fsError(err, "open")
	}
	if err := unix.Fstat(fd, &got); err != nil {
		unix.Close(fd)
		return nil, got, fsError(err, "examine")
	}
	if got.Dev != st.Dev || got.Ino != st.Ino {
		unix.Close(fd)
		return nil, got, errReplaced
	}
	return os.NewFile(uintptr(fd), t.name), got, nil
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
