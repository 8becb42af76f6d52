// Package atomicfile replaces a file atomically: a reader sees the old file
// or the new one, never a torn one, and a crash leaves one of the two.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// SyncDir makes what was done to the entries of directory dir (files
// created, renamed or removed) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

// Write writes data to path with mode perm: a temporary file in the same
// directory, fsync, rename, fsync of the directory. The directory must
// exist.
func Write(path string, data []byte, perm os.FileMode) error {
	return writePath(path, data, Options{Perm: perm})
}

// writePath is WriteAt of path's base name in its directory.
func writePath(path string, data []byte, o Options) error {
	dir, err := os.OpenFile(filepath.Dir(path), os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("open dir: %w", err)
	}
	defer dir.Close()
	return WriteAt(dir, filepath.Base(path), data, o)
}

// Options say what a replacement is besides its content.
type Options struct {
	// Perm is the new file's mode; zero leaves what the umask makes of 0666,
	// as for any newly created file.
	Perm os.FileMode
	// Like, when set, is the file being replaced, open (O_PATH is enough):
	// the replacement keeps its owner, its whole mode (set-id and sticky
	// bits, and no bits at all, included) and its extended attributes, ACLs
	// among them; Perm is then not used. Only root may keep another user's
	// ownership.
	Like *os.File
	// Unsynced leaves out both fsyncs, for a cache whose loss costs only
	// its rebuild: a crash may leave the old file, the new one or, on
	// some file systems, an empty one, which its reader must take as
	// missing. Readers never see a torn file while the system runs.
	Unsynced bool
	// Exclusive refuses, atomically, to replace a file that exists: the
	// error is then fs.ErrExist and nothing changed.
	Exclusive bool
}

// WriteAt is Write of name inside the open directory dir (which must be
// open for reading, so that it can be fsynced): every step is relative to
// that directory, so a path swapped while writing cannot redirect it.
func WriteAt(dir *os.File, name string, data []byte, o Options) error {
	dfd := int(dir.Fd())
	// Private until it has its mode: another user who opened a
	// umask-readable temporary file would read what is written next.
	createMode := uint32(0o600)
	if o.Perm == 0 && o.Like == nil {
		createMode = 0o666
	}
	tmp, fd, err := createTemp(dfd, name, createMode)
	if err != nil {
		return fmt.Errorf("create temp: %w", err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	ok := false
	defer func() {
		if !ok {
			f.Close()
			unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write temp: %w", err)
	}
	// The mode last: a write by a process without CAP_FSETID clears set-id
	// bits, and a chown clears them and file capabilities.
	switch {
	case o.Like != nil:
		if err := keep(f, o.Like); err != nil {
			return err
		}
	case o.Perm != 0:
		// Not the umask-filtered create mode: the mode is the caller's.
		if err := f.Chmod(o.Perm); err != nil {
			return fmt.Errorf("chmod temp: %w", err)
		}
	}
	if !o.Unsynced {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync temp: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close temp: %w", err)
	}
	if err := rename(dfd, tmp, name, o.Exclusive); err != nil {
		return err
	}
	ok = true
	if o.Unsynced {
		return nil
	}
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	return nil
}

// ErrAttributes is the error, wrapped, when the replacement cannot be
// given an extended attribute of the file it replaces.
var ErrAttributes = errors.New("the file's extended attributes cannot be kept")

// keep gives f the owner, extended attributes and mode of like, in that
// order: a chown clears set-id bits and capabilities, and an ACL sets the
// group bits of the mode, which the mode then sets back as they were.
func keep(f, like *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(like.Fd()), &st); err != nil {
		return fmt.Errorf("examine the replaced file: %w", err)
	}
	if err := unix.Fchown(int(f.Fd()), int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("chown temp: %w", err)
	}
	if err := copyXattrs(f, like); err != nil {
		return err
	}
	if err := unix.Fchmod(int(f.Fd()), st.Mode&0o7777); err != nil {
		return fmt.Errorf("chmod temp: %w", err)
	}
	return nil
}

// copyXattrs copies every extended attribute this process can read from
// like to f. like may be an O_PATH descriptor, which the *xattr calls on
// descriptors refuse, so it is named through /proc/self/fd.
func copyXattrs(f, like *os.File) error {
	src := "/proc/self/fd/" + strconv.Itoa(int(like.Fd()))
	names, err := listXattrs(src)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAttributes, err)
	}
	for _, name := range names {
		val, err := getXattr(src, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since it was listed
		}
		if err == nil {
			err = unix.Fsetxattr(int(f.Fd()), name, val, 0)
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrAttributes, err)
		}
	}
	return nil
}

// listXattrs returns the names of path's extended attributes; a file
// system without them has none.
func listXattrs(path string) ([]string, error) {
	buf, err := sized(func(b []byte) (int, error) { return unix.Listxattr(path, b) })
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range strings.Split(string(buf), "\x00") {
		if n != "" {
			names = append(names, n)
		}
	}
	return names, nil
}

func getXattr(path, name string) ([]byte, error) {
	return sized(func(b []byte) (int, error) { return unix.Getxattr(path, name, b) })
}

// sized calls an *xattr function that fills b, first with no buffer to
// learn the size, again when the value grew in between (ERANGE).
func sized(call func([]byte) (int, error)) ([]byte, error) {
	for {
		n, err := call(nil)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, nil
		}
		buf := make([]byte, n)
		n, err = call(buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// maxTempStem bounds how much of the target's name the temporary file's
// carries, so that a 255-byte name still has a temporary name that fits.
const maxTempStem = 200

func createTemp(dfd int, name string, mode uint32) (string, int, error) {
	stem := name
	if len(stem) > maxTempStem {
		stem = stem[:maxTempStem]
	}
	for range 100 {
		var r [6]byte
		rand.Read(r[:])
		tmp := "." + stem + ".tmp" + hex.EncodeToString(r[:])
		fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, mode)
		switch {
		case err == nil:
			return tmp, fd, nil
		case errors.Is(err, unix.EEXIST), errors.Is(err, unix.EINTR):
			continue
		default:
			return "", -1, err
		}
	}
	return "", -1, errors.New("no free temporary name")
}

// rename moves tmp onto name; exclusive refuses an existing name. A file
// system without RENAME_NOREPLACE gets the same guarantee from link(2).
func rename(dfd int, tmp, name string, exclusive bool) error {
	if !exclusive {
		if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
			return fmt.Errorf("rename into place: %w", err)
		}
		return nil
	}
	err := unix.Renameat2(dfd, tmp, dfd, name, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		if err = unix.Linkat(dfd, tmp, dfd, name, 0); err == nil {
			unix.Unlinkat(dfd, tmp, 0)
		}
	}
	switch {
	case errors.Is(err, unix.EEXIST):
		return fmt.Errorf("rename into place: %w", fs.ErrExist)
	case err != nil:
		return fmt.Errorf("rename into place: %w", err)
	}
	return nil
}

// WriteJSON is Write of v encoded as JSON, owner-only: the form of every
// metadata and state file the agent and its supervisors keep.
func WriteJSON(path string, v any) error { return writeJSON(path, v, Options{Perm: 0o600}) }

// WriteCacheJSON is WriteJSON with Options.Unsynced: for a file that only
// saves work and is rebuilt when missing or unreadable.
func WriteCacheJSON(path string, v any) error {
	return writeJSON(path, v, Options{Perm: 0o600, Unsynced: true})
}

func writeJSON(path string, v any, o Options) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	return writePath(path, data, o)
}

// Create publishes data at path with mode perm unless path exists, in
// which case the error is fs.ErrExist and the file there is untouched:
// of writers racing to create the same file, exactly one wins.
func Create(path string, data []byte, perm os.FileMode) error {
	return writePath(path, data, Options{Perm: perm, Exclusive: true})
}
