// Package atomicfile replaces a file atomically: a reader sees the old file
// or the new one, never a torn one, and a crash leaves one of the two.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Write writes data to path with mode perm: a temporary file in the same
// directory, fsync, rename, fsync of the directory. The directory must
// exist.
func Write(path string, data []byte, perm os.FileMode) error {
	dir, err := os.OpenFile(filepath.Dir(path), os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("open dir: %w", err)
	}
	defer dir.Close()
	return WriteAt(dir, filepath.Base(path), data, Options{Perm: perm})
}

// Options say what a replacement is besides its content.
type Options struct {
	// Perm is the new file's mode; zero leaves what the umask makes of 0666,
	// as for any newly created file.
	Perm os.FileMode
	// Owner, when set, is given to the new file (an existing file's owner,
	// to keep it). Only root may give a file to another user.
	Owner *Owner
	// Exclusive refuses, atomically, to replace a file that exists: the
	// error is then fs.ErrExist and nothing changed.
	Exclusive bool
}

// Owner is a file's user and group.
type Owner struct{ UID, GID int }

// WriteAt is Write of name inside the open directory dir (which must be
// open for reading, so that it can be fsynced): every step is relative to
// that directory, so a path swapped while writing cannot redirect it.
func WriteAt(dir *os.File, name string, data []byte, o Options) error {
	dfd := int(dir.Fd())
	// Private until it has its mode: another user who opened a
	// umask-readable temporary file would read what is written next.
	createMode := uint32(0o600)
	if o.Perm == 0 {
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
	if o.Owner != nil {
		if err := f.Chown(o.Owner.UID, o.Owner.GID); err != nil {
			return fmt.Errorf("chown temp: %w", err)
		}
	}
	// Chmod after chown (which clears set-id bits), and not the
	// umask-filtered create mode: the mode is the caller's.
	if o.Perm != 0 {
		if err := f.Chmod(o.Perm); err != nil {
			return fmt.Errorf("chmod temp: %w", err)
		}
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write temp: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync temp: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close temp: %w", err)
	}
	if err := rename(dfd, tmp, name, o.Exclusive); err != nil {
		return err
	}
	ok = true
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	return nil
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
