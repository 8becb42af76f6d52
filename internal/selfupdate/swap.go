package selfupdate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/commandcore/commandcore/internal/atomicfile"
)

// PreviousSuffix names the binary an update replaced, beside the installed
// one: the known good binary a rollback puts back.
const PreviousSuffix = ".previous"

// PreviousPath is where Swap keeps the binary it replaced at exe.
func PreviousPath(exe string) string { return exe + PreviousSuffix }

// Swap puts the file at next in place of exe, keeping the binary exe was
// as PreviousPath(exe). exe names a binary at every moment: the previous
// one is linked (not moved) to its new name first, and next is renamed
// over exe in one step. A running process keeps the binary it started
// from (renaming never touches an open file's contents).
func Swap(exe, next string) error {
	if err := keepPrevious(exe); err != nil {
		return err
	}
	if err := os.Rename(next, exe); err != nil {
		return fmt.Errorf("put the new binary in place: %w", err)
	}
	return syncDir(filepath.Dir(exe))
}

// Restore puts PreviousPath(exe) back at exe, keeping it under its own
// name as well, so a second rollback finds it still.
func Restore(exe string) error {
	prev := PreviousPath(exe)
	tmp := exe + ".restore"
	os.Remove(tmp)
	if err := os.Link(prev, tmp); err != nil {
		return fmt.Errorf("put the previous binary back: %w", err)
	}
	if err := os.Rename(tmp, exe); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("put the previous binary back: %w", err)
	}
	return syncDir(filepath.Dir(exe))
}

// keepPrevious links exe as PreviousPath(exe), replacing any older one
// atomically.
func keepPrevious(exe string) error {
	fi, err := os.Lstat(exe)
	if err != nil {
		return fmt.Errorf("the installed binary: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return errors.New("the installed binary is not a regular file")
	}
	tmp := exe + ".keep"
	os.Remove(tmp)
	if err := os.Link(exe, tmp); err != nil {
		return fmt.Errorf("keep the previous binary: %w", err)
	}
	if err := os.Rename(tmp, PreviousPath(exe)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("keep the previous binary: %w", err)
	}
	return nil
}

// syncDir makes the swap in the binary's directory durable.
func syncDir(dir string) error {
	if err := atomicfile.SyncDir(dir); err != nil {
		return fmt.Errorf("sync the binary's directory: %w", err)
	}
	return nil
}
