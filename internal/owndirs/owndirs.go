// Package owndirs keeps the tools out of the agent's own directories
// (README): its config directory (identity, permissions)
// and its state directory (policy, journal, job metadata and output). No
// tool reads, lists or writes inside them; files.search skips them.
//
// Directories are recognised by device and inode, not by path, so neither a
// symlink, a bind mount, a second spelling of the path nor a rename after
// start-up leads a tool inside.
package owndirs

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/errcode"
)

// ErrInside is the refusal for a path inside one of the agent's own
// directories. It does not name the path.
var ErrInside = errcode.New(errcode.PermissionDenied, "the path is inside the agent's own directories, which no tool may reach")

type fileID struct{ dev, ino uint64 }

// Set is the agent's own directories. The zero Set and a nil *Set protect
// nothing.
type Set struct {
	ids map[fileID]bool
}

// New returns the set of dirs, creating each (0700) if missing so that it
// has an identity to recognise from the start.
func New(dirs ...string) (*Set, error) {
	s := &Set{ids: map[fileID]bool{}}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "cannot create the agent's directories")
		}
		var st syscall.Stat_t
		if err := syscall.Stat(d, &st); err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "cannot examine the agent's directories")
		}
		s.ids[fileID{uint64(st.Dev), st.Ino}] = true
	}
	return s, nil
}

// IsOwn reports whether the directory open as fd is one of the set.
func (s *Set) IsOwn(fd int) bool {
	if s == nil || len(s.ids) == 0 {
		return false
	}
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil {
		// What cannot be examined cannot be shown to be safe.
		return true
	}
	return s.ids[fileID{uint64(st.Dev), st.Ino}]
}

// Check refuses path with ErrInside when it is one of the set or lies
// beneath one, following symlinks as opening it would. A path that does
// not exist yet is judged by its nearest existing parent, so a file about
// to be created inside is refused too.
func (s *Set) Check(path string) error {
	if s == nil || len(s.ids) == 0 {
		return nil
	}
	// The nearest existing part of the path, every symlink resolved, so
	// that walking up it by name walks up the real tree. Not cleaned
	// first: ".." after a symlink leaves the link's target, as the kernel
	// resolves it, not the link's own directory.
	p := path
	for {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			p = r
			break
		}
		parent := dropLast(p)
		if parent == p {
			return nil
		}
		p = parent
	}
	for {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil && s.ids[fileID{uint64(st.Dev), st.Ino}] {
			return ErrInside
		}
		parent := filepath.Dir(p)
		if parent == p {
			return nil
		}
		p = parent
	}
}

// dropLast removes path's last element by name only, unlike filepath.Dir,
// which cleans away a ".." the kernel would resolve after a symlink.
func dropLast(path string) string {
	p := strings.TrimRight(path, "/")
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// CheckDir refuses, with ErrInside, the directory open as fd when it or
// any directory above it is one of the set. It walks up by "..", never by
// name, so the answer is about the directory that is open, whatever path
// led to it and whatever was renamed since.
func (s *Set) CheckDir(fd int) error {
	if s == nil || len(s.ids) == 0 {
		return nil
	}
	cur, err := unix.Openat(fd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ErrInside
	}
	defer func() { unix.Close(cur) }()
	var st unix.Stat_t
	if unix.Fstat(cur, &st) != nil {
		return ErrInside
	}
	for {
		if s.ids[fileID{uint64(st.Dev), st.Ino}] {
			return ErrInside
		}
		parent, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			// What cannot be examined cannot be shown to be safe.
			return ErrInside
		}
		var pst unix.Stat_t
		if unix.Fstat(parent, &pst) != nil {
			unix.Close(parent)
			return ErrInside
		}
		unix.Close(cur)
		cur = parent
		if pst.Dev == st.Dev && pst.Ino == st.Ino {
			return nil // the root: its ".." is itself
		}
		st = pst
	}
}
