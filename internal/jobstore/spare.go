package jobstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/jobmeta"
)

// A spare is a job directory made before its job: a supervisor waits in it
// for a job's envelope, so that the job starts without waiting for a unit.
// Until its job.json is written it is invisible: listing, admission and
// retention skip a directory without one. The process that keeps the spare
// holds a lock on its SpareLockFile, so that a dead process's spare, never
// a live one's, is swept.

// PrepareSpare makes the directory of spare id and returns its lock, held.
func (s *Store) PrepareSpare(id string) (*os.File, error) {
	if !jobmeta.ValidID(id) {
		return nil, fmt.Errorf("prepare spare: invalid job id")
	}
	var lock *os.File
	// Under the admission lock, so that no sweep sees the directory before
	// its lock is held.
	err := s.withLock(func() error {
		dir := s.Dir(id)
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fmt.Errorf("create spare directory: %w", err)
		}
		f, err := os.OpenFile(filepath.Join(dir, jobmeta.SpareLockFile), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
				f.Close()
			}
		}
		if err != nil {
			os.RemoveAll(dir)
			return fmt.Errorf("lock spare directory: %w", err)
		}
		lock = f
		return nil
	})
	return lock, err
}

// AdmitSpare admits j into the directory of the spare named j.ID, as Admit
// does a new one, and releases the spare's lock: from then on it is a job.
// A job that is not admitted leaves the spare as it was.
func (s *Store) AdmitSpare(j *jobmeta.Job, lock *os.File) error {
	err := s.admit(j, func(dir string) error {
		if err := atomicfile.WriteJSON(filepath.Join(dir, jobmeta.JobFile), j); err != nil {
			return fmt.Errorf("write job metadata: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	os.Remove(filepath.Join(s.Dir(j.ID), jobmeta.SpareLockFile))
	lock.Close()
	return nil
}

// DismissSpare removes the directory of spare id, unless a job was admitted
// into it, and releases its lock.
func (s *Store) DismissSpare(id string, lock *os.File) {
	defer lock.Close()
	if !jobmeta.ValidID(id) {
		return
	}
	s.withLock(func() error {
		if _, err := os.Lstat(s.file(id, jobmeta.JobFile)); errors.Is(err, os.ErrNotExist) {
			os.RemoveAll(s.Dir(id))
		}
		return nil
	})
}

// isSpare reports whether the directory of id, without job.json, is a
// spare's: one that waits for its job however long, no damaged job.
func (s *Store) isSpare(id string) bool {
	_, err := os.Lstat(s.file(id, jobmeta.SpareLockFile))
	return err == nil
}

// SweepSpares removes the spare directories no live process keeps: those
// without job.json whose lock is free.
func (s *Store) SweepSpares() error {
	return s.eachSpare(func(id string, kept bool) {
		if !kept {
			os.RemoveAll(s.Dir(id))
		}
	})
}

// Spares counts the spares live processes keep: supervisors started
// ahead, waiting for a job.
func (s *Store) Spares() (int, error) {
	n := 0
	err := s.eachSpare(func(_ string, kept bool) {
		if kept {
			n++
		}
	})
	return n, err
}

// eachSpare calls fn with every spare's ID and whether a live process
// keeps it (holds its lock), under the admission lock: no spare is made
// meanwhile, whose lock would be seen free before it is taken.
func (s *Store) eachSpare(fn func(id string, kept bool)) error {
	return s.withLock(func() error {
		ids, err := s.ids()
		if err != nil {
			return err
		}
		for _, id := range ids {
			if _, err := os.Lstat(s.file(id, jobmeta.JobFile)); !errors.Is(err, os.ErrNotExist) {
				continue
			}
			f, err := os.OpenFile(s.file(id, jobmeta.SpareLockFile), os.O_RDWR|unix.O_NOFOLLOW, 0)
			if err != nil {
				continue // not a spare's
			}
			free := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
			// Closing releases the probe's lock before fn removes anything.
			f.Close()
			fn(id, !free)
		}
		return nil
	})
}
