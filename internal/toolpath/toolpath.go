// Package toolpath resolves the paths the file tools name and refuses,
// on the way, what no tool may reach: the agent's own directories (package
// owndirs) and the per-process files of /proc.
//
// A path is resolved as the kernel resolves it, but one name at a time
// from "/" through open directories: every directory entered is open
// before the next name is looked up in it, a symlink is read and its
// target resolved from the directory it is in (from "/" when absolute),
// and ".." is the open directory's real parent. So the directory the
// answer names is the one every check examined, whatever is renamed or
// swapped meanwhile, and nothing is created (make_dirs) before the
// directory it is created in has been judged.
//
// Per-process files are every name under /proc/<pid>/ (self and
// thread-self included): a job's environment, command line, memory,
// descriptors, working directory and root are there, and the magic links
// among them (root, cwd, fd/N) lead into a job's mount namespace where no
// check of this agent's can follow. A proc file system is recognised by
// its magic number wherever it is mounted, and its root by inode 1, so a
// second mount or a symlink to it changes nothing. What is not
// per-process (/proc/meminfo, /proc/sys) stays reachable.
package toolpath

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/eintr"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/owndirs"
)

// ErrProcess refuses a per-process file under /proc. It does not name the
// path.
var ErrProcess = errcode.New(errcode.PermissionDenied, "the path is a per-process file under /proc (a process's environment, memory, descriptors or namespaces), which no tool may reach")

// ErrNotDirectory is Dir's error for a path that names something other
// than a directory. A name on the way that is not a directory answers
// ENOENT: no such directory leads on.
var ErrNotDirectory = errors.New("not a directory")

// maxLinks is how many symlinks one resolution follows, as the kernel's
// MAXSYMLINKS; more is ELOOP.
const maxLinks = 40

// procRootIno is the inode of a proc file system's root directory.
const procRootIno = 1

// ReadDir reads the entries of the directory open as fd, through a
// close-on-exec copy of it, as every descriptor the agent opens is: a
// command started meanwhile must not inherit a directory to climb from.
// fd stays open, its offset at the end.
func ReadDir(fd int) ([]os.DirEntry, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "")
	defer f.Close()
	return f.ReadDir(-1)
}

// IsPerProcess reports whether name, in the directory open as dirfd, is a
// per-process entry of a proc file system's root: a PID, self or
// thread-self. What cannot be examined counts as one.
func IsPerProcess(dirfd int, name string) bool {
	if !perProcessName(name) {
		return false
	}
	var fs unix.Statfs_t
	if unix.Fstatfs(dirfd, &fs) != nil {
		return true
	}
	if fs.Type != unix.PROC_SUPER_MAGIC {
		return false
	}
	var st unix.Stat_t
	if unix.Fstat(dirfd, &st) != nil {
		return true
	}
	return st.Ino == procRootIno
}

func perProcessName(name string) bool {
	if name == "self" || name == "thread-self" {
		return true
	}
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return false
		}
	}
	return true
}

// Parent resolves path to the real directory of what it names, open for
// reading, and the name there: every symlink on the way is followed, a
// final one too, so the name is never a symlink. It need not exist; its
// directory must, unless makeDirs creates the missing ones (mode 0777
// less the umask). A path naming a directory itself ("/", or ending in
// "." or "..") answers that directory and the name ".".
func Parent(own *owndirs.Set, path string, makeDirs bool) (*os.File, string, error) {
	w, err := newWalker(own, path, makeDirs)
	if err != nil {
		return nil, "", err
	}
	defer w.close()
	name, err := w.run(true)
	if err != nil {
		return nil, "", err
	}
	dir, err := w.reopen()
	if err != nil {
		return nil, "", err
	}
	return dir, name, nil
}

// Dir resolves path, every symlink followed, to the directory it names,
// open for reading.
func Dir(own *owndirs.Set, path string) (*os.File, error) {
	w, err := newWalker(own, path, false)
	if err != nil {
		return nil, err
	}
	defer w.close()
	if _, err := w.run(false); err != nil {
		return nil, err
	}
	return w.reopen()
}

// walker is one resolution in progress: cur is the directory reached (an
// O_PATH descriptor), rest the names still to resolve, in order.
type walker struct {
	own      *owndirs.Set
	root     int
	cur      int
	rest     []string
	links    int
	makeDirs bool
}

func newWalker(own *owndirs.Set, path string, makeDirs bool) (*walker, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, errcode.New(errcode.InvalidArgument, "path must be an absolute path")
	}
	root, err := eintr.Openat(unix.AT_FDCWD, "/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	cur, err := unix.FcntlInt(uintptr(root), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(root)
		return nil, err
	}
	w := &walker{own: own, root: root, cur: cur, makeDirs: makeDirs}
	w.push(path)
	return w, nil
}

func (w *walker) close() {
	unix.Close(w.cur)
	unix.Close(w.root)
}

// push puts the names of path before the ones still to resolve. A
// trailing slash names a directory, as "." after the name does.
func (w *walker) push(path string) {
	var names []string
	for _, n := range strings.Split(path, "/") {
		if n != "" {
			names = append(names, n)
		}
	}
	if strings.HasSuffix(path, "/") {
		names = append(names, ".")
	}
	w.rest = append(names, w.rest...)
}

// run resolves the names. With stopAtLast, the last name that is not a
// symlink is returned unresolved ("." when the path names a directory
// itself); otherwise every name is entered as a directory.
func (w *walker) run(stopAtLast bool) (string, error) {
	for len(w.rest) > 0 {
		name := w.rest[0]
		w.rest = w.rest[1:]
		last := len(w.rest) == 0
		switch name {
		case ".":
			if last && stopAtLast {
				return ".", nil
			}
			continue
		case "..":
			if err := w.enter(".."); err != nil {
				return "", err
			}
			if last && stopAtLast {
				return ".", nil
			}
			continue
		}
		if IsPerProcess(w.cur, name) {
			return "", ErrProcess
		}
		var st unix.Stat_t
		err := unix.Fstatat(w.cur, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case errors.Is(err, unix.ENOENT) && last && stopAtLast:
			return name, nil
		case errors.Is(err, unix.ENOENT) && w.makeDirs && !last:
			if err := unix.Mkdirat(w.cur, name, 0o777); err != nil && !errors.Is(err, unix.EEXIST) {
				return "", err
			}
			if err := w.enter(name); err != nil {
				return "", err
			}
			continue
		case err != nil:
			return "", err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if err := w.follow(name); err != nil {
				return "", err
			}
			continue
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if last && stopAtLast {
			if isDir && w.isOwn(name) {
				return "", owndirs.ErrInside
			}
			return name, nil
		}
		if !isDir {
			if last {
				return "", ErrNotDirectory
			}
			return "", unix.ENOENT
		}
		if err := w.enter(name); err != nil {
			return "", err
		}
	}
	if stopAtLast {
		return ".", nil
	}
	return "", nil
}

// follow reads the symlink name in cur and queues its target.
func (w *walker) follow(name string) error {
	if w.links++; w.links > maxLinks {
		return unix.ELOOP
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(w.cur, name, buf)
	if err != nil {
		return err
	}
	target := string(buf[:n])
	if target == "" {
		return unix.ENOENT
	}
	if strings.HasPrefix(target, "/") {
		if err := w.replace(w.root); err != nil {
			return err
		}
	}
	w.push(target)
	return nil
}

// enter makes the directory name of cur the current one, refusing one of
// the agent's own. The name must not be a symlink (it was examined) or, if
// it became one meanwhile, the open fails.
func (w *walker) enter(name string) error {
	fd, err := eintr.Openat(w.cur, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if w.own.IsOwn(fd) {
		unix.Close(fd)
		return owndirs.ErrInside
	}
	unix.Close(w.cur)
	w.cur = fd
	return nil
}

// isOwn reports whether the directory name of cur is one of the agent's
// own.
func (w *walker) isOwn(name string) bool {
	fd, err := eintr.Openat(w.cur, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return true // what cannot be examined cannot be shown to be safe
	}
	defer unix.Close(fd)
	return w.own.IsOwn(fd)
}

// replace makes a duplicate of fd the current directory.
func (w *walker) replace(fd int) error {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	unix.Close(w.cur)
	w.cur = d
	return nil
}

// reopen opens the current directory for reading (to list or fsync it).
func (w *walker) reopen() (*os.File, error) {
	fd, err := eintr.Openat(w.cur, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "."), nil
}
