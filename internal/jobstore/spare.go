package jobstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/jobmeta"
)

// A spare is a job directory made before its job: a supervisor waits in it
// for a job's envelope, so that the job starts without waiting for a unit.
// Until its launch record is written it is invisible: listing, admission
// and retention skip a directory without one. The process that keeps the
// spare holds a lock on <state-dir>/launches/<id>.spare, out of every
// job's reach, so that a dead process's spare, never a live one's, is
// swept, and no job makes itself one.

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
		f, err := os.OpenFile(s.spareLockPath(id), os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return fmt.Errorf("lock spare directory: %w", err)
		}
		if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			if err = os.Mkdir(dir, 0o700); err != nil {
				err = fmt.Errorf("create spare directory: %w", err)
			}
		} else {
			err = fmt.Errorf("lock spare directory: %w", err)
		}
		if err != nil {
			f.Close()
			os.Remove(s.spareLockPath(id))
			return err
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
	err := s.admit(j, func(dir string) error { return writeJobCopy(dir, j) })
	if err != nil {
		return err
	}
	os.Remove(s.spareLockPath(j.ID))
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
		if !s.launched(id) {
			os.RemoveAll(s.Dir(id))
			os.Remove(s.spareLockPath(id))
		}
		return nil
	})
}

// launched reports whether job id has a launch record: a job was admitted
// into its directory.
func (s *Store) launched(id string) bool {
	_, err := os.Lstat(s.launchPath(id))
	return !errors.Is(err, os.ErrNotExist)
}

// isSpare reports whether the directory of id, without a launch record,
// is a spare's: one that waits for its job however long, no damaged job.
func (s *Store) isSpare(id string) bool {
	for _, p := range []string{s.spareLockPath(id), s.file(id, jobmeta.SpareLockFile)} {
		if _, err := os.Lstat(p); err == nil {
			return true
		}
	}
	return false
}

// SweepSpares removes the spare directories no live process keeps: those
// without a launch record whose lock is free.
func (s *Store) SweepSpares() error {
	return s.eachSpare(func(id string, kept bool) {
		if !kept {
			os.RemoveAll(s.Dir(id))
			os.Remove(s.spareLockPath(id))
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
			if s.launched(id) {
				continue
			}
			f, err := s.openSpareLock(id)
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

// openSpareLock opens the lock of spare id, which has no launch record:
// this build's, or in the directory of an earlier build's spare, which
// holds no job.json either (a job of that build is adopted instead).
func (s *Store) openSpareLock(id string) (*os.File, error) {
	f, err := os.OpenFile(s.spareLockPath(id), os.O_RDWR|unix.O_NOFOLLOW, 0)
	if !errors.Is(err, os.ErrNotExist) {
		return f, err
	}
	if _, err := os.Lstat(s.file(id, jobmeta.JobFile)); !errors.Is(err, os.ErrNotExist) {
		return nil, fs.ErrExist
	}
	return os.OpenFile(s.file(id, jobmeta.SpareLockFile), os.O_RDWR|unix.O_NOFOLLOW, 0)
}
