package jobmeta

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/ownerfile"
)

// Dir is an open job directory. A job can write its own directory, so it
// could put a link to another job's files in place of its own: every file
// the agent reads from a job is opened relative to this descriptor, never
// through a link, and only when it is a regular file of the agent's user
// (package ownerfile). Anything else is refused, as corrupt evidence.
type Dir struct{ f *os.File }

// OpenDir opens the job directory at path. A missing directory is an error
// matching os.ErrNotExist; a link or another user's directory is refused.
func OpenDir(path string) (*Dir, error) {
	f, err := ownerfile.OpenDir(path)
	if err != nil {
		return nil, fmt.Errorf("open job directory: %w", err)
	}
	return &Dir{f: f}, nil
}

// Close releases the directory.
func (d *Dir) Close() error { return d.f.Close() }

// Open opens the job file name (StdoutFile, StderrFile) for reading. A
// missing file matches os.ErrNotExist; one refused is an *ownerfile.Error.
func (d *Dir) Open(name string) (*os.File, error) {
	return ownerfile.OpenIn(d.f, name, ownerfile.SharedWrite)
}

// ReadIn decodes the metadata file name of the job directory d into v, as
// Read does.
func ReadIn[T any, P interface {
	*T
	Versioned
}](d *Dir, name string) (*T, error) {
	return decodeRead[T, P](ownerfile.ReadIn(d.f, name, limits.MaxMetadataBytes, ownerfile.SharedWrite))
}

// Read decodes the metadata file at path, inside its job directory, into
// v. A missing file returns an error satisfying errors.Is(err,
// os.ErrNotExist); anything unreadable, oversized, malformed or from an
// unknown schema returns ErrCorrupt.
func Read[T any, P interface {
	*T
	Versioned
}](path string) (*T, error) {
	d, err := OpenDir(filepath.Dir(path))
	if err != nil {
		return nil, readErr(err)
	}
	defer d.Close()
	return ReadIn[T, P](d, filepath.Base(path))
}

// ReadClaimIn reads the supervisor's claim in d, under its name or, in a
// job directory of an earlier build, under LegacyClaimFile.
func ReadClaimIn(d *Dir) (*Claim, error) {
	c, err := ReadIn[Claim](d, ClaimFile)
	if errors.Is(err, os.ErrNotExist) {
		return ReadIn[Claim](d, LegacyClaimFile)
	}
	return c, err
}

// ReadClaim is ReadClaimIn of the job directory at dir.
func ReadClaim(dir string) (*Claim, error) {
	d, err := OpenDir(dir)
	if err != nil {
		return nil, readErr(err)
	}
	defer d.Close()
	return ReadClaimIn(d)
}

// Claimed reports whether the job directory at dir holds a claim, under
// either name.
func Claimed(dir string) bool {
	for _, name := range []string{ClaimFile, LegacyClaimFile} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}
