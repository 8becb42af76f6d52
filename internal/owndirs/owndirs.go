// Package owndirs keeps the tools out of the agent's own directories
// (README): its config directory (identity, permissions)
// and its state directory (policy, journal, job metadata and output). No
// tool reads, lists or writes inside them; files.search skips them.
//
// Directories are recognised by device and inode, not by path, so neither a
// symlink, a bind mount, a second spelling of the path nor a rename after
// start-up leads a tool inside (package toolpath checks every directory a
// path passes through); a file of theirs is recognised by device and inode
// too, so a hard link to it elsewhere is refused like the file itself.
package owndirs

import (
	"errors"
	"os"
	"sync"
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
	ids  map[fileID]bool
	dirs []string
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
		s.dirs = append(s.dirs, d)
	}
	return s, nil
}

// maxScanEntries bounds the walk of the agent's own directories that looks
// for a file's other names; the journal, identity and retained jobs are a
// few thousand entries.
const maxScanEntries = 100_000

// Links answers, for the files of one call, whether a file is one of the
// agent's own under another name: a hard link to it made elsewhere, which
// no check of directories can see. It walks the own directories once, on
// the first file that has more than one link, and answers the call's later
// files from what it found. It is safe for concurrent use.
type Links struct {
	set    *Set
	once   sync.Once
	files  map[fileID]bool
	failed bool
}

// Links returns an empty memory of the own directories' files.
func (s *Set) Links() *Links { return &Links{set: s} }

// Own reports whether the file st (from fstat or lstat) is also a file of
// the agent's own directories. A file with one link cannot be; when the
// directories cannot be walked whole the answer is yes, since what cannot
// be examined cannot be shown to be safe.
func (l *Links) Own(st *unix.Stat_t) bool {
	if l == nil || l.set == nil || len(l.set.dirs) == 0 || st.Nlink <= 1 || st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return false
	}
	l.once.Do(func() {
		l.files = map[fileID]bool{}
		budget := maxScanEntries
		for _, d := range l.set.dirs {
			if !l.scan(d, &budget) {
				l.failed = true
				break
			}
		}
	})
	return l.failed || l.files[fileID{uint64(st.Dev), st.Ino}]
}

// scan records the files beneath dir with more than one link, never
// following a symlink; false when it could not finish.
func (l *Links) scan(dir string, budget *int) bool {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	return l.scanFD(fd, budget)
}

func (l *Links) scanFD(fd int, budget *int) bool {
	f := os.NewFile(uintptr(fd), "")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return false
	}
	for _, name := range names {
		if *budget--; *budget < 0 {
			return false
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // gone since it was listed
			}
			return false
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.ENOENT) {
				continue // removed since it was listed
			}
			if err != nil || !l.scanFD(sub, budget) {
				return false
			}
		case unix.S_IFLNK:
		default:
			if st.Nlink > 1 {
				l.files[fileID{uint64(st.Dev), st.Ino}] = true
			}
		}
	}
	return true
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
