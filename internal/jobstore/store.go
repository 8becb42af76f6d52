// Package jobstore keeps managed jobs on disk: one directory per job under
// <state-dir>/jobs, admission of live jobs, retention of terminal ones, and
// the derivation of each job's record from the files its writers left. It
// knows no network and no systemd; unit evidence arrives through a hook.
package jobstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/reconcile"
)

// lockFile serialises admission and retention between processes (the agent
// and any number of `commandcore mcp`).
const lockFile = ".admission.lock"

// orphanAfter is how long a job may stay without an identity claim before
// it is concluded that its launcher died mid-launch.
const orphanAfter = 2 * limits.ClaimTimeout

// Store is the job directory tree.
type Store struct {
	root string
	// launches holds the launch records (launch.go).
	launches string
	procs    *procid.Source
	// Now is the clock; tests move it.
	Now func() time.Time
	// UnitEvidence, when set, returns what systemd retained about a failed
	// unit; it is asked only for jobs whose supervisor is gone.
	UnitEvidence func(unit string) (*reconcile.UnitEvidence, error)
	// OnReconciled, when set, is told of each conclusion drawn from
	// evidence once it is persisted.
	OnReconciled func(id string, state jobmeta.State)
	// ResetUnit, when set, clears job id's failed unit once nothing more is
	// to be read from it (ReleaseUnit): after its evidence has been
	// persisted in the job's reconciled record, or when the job's end is
	// the supervisor's own record.
	ResetUnit func(id, unit string) error

	// IndexEvery is how many newly ended jobs a process keeps before it
	// rewrites the admission index; zero means 16 (index.go).
	IndexEvery int

	indexCache indexCache
	running    running
	// aside are the directories retention took out of the table whose
	// removal waits for Sweep; discards the removals under way.
	asideMu  sync.Mutex
	aside    []string
	discards sync.WaitGroup
}

// Open returns the store under stateDir, creating <stateDir>/jobs and
// <stateDir>/launches (0700).
func Open(stateDir string, procs *procid.Source) (*Store, error) {
	s := OpenExisting(stateDir, procs)
	for _, d := range []string{s.root, s.launches} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create job store: %w", err)
		}
	}
	s.removeDiscarded()
	return s, nil
}

// OpenExisting returns the store under stateDir without creating it: a
// missing <stateDir>/jobs holds no jobs. It is for commands that read or
// act on existing jobs and never admit one.
func OpenExisting(stateDir string, procs *procid.Source) *Store {
	return &Store{root: filepath.Join(stateDir, "jobs"), launches: filepath.Join(stateDir, launchesDir), procs: procs,
		Now: func() time.Time { return time.Now().UTC() }}
}

// Root is the directory that holds the job directories.
func (s *Store) Root() string { return s.root }

// Dir returns the directory of job id. id must be valid.
func (s *Store) Dir(id string) string { return filepath.Join(s.root, id) }

func (s *Store) file(id, name string) string { return filepath.Join(s.root, id, name) }

// OpenDir opens the directory of job id, for reading its files
// (jobmeta.Dir). id must be valid.
func (s *Store) OpenDir(id string) (*jobmeta.Dir, error) { return jobmeta.OpenDir(s.Dir(id)) }

// checkID turns a malformed ID into invalid_argument and a missing job into
// not_found, so no caller ever joins an unchecked string into a path.
func (s *Store) checkID(id string) error {
	if !jobmeta.ValidID(id) {
		return errcode.New(errcode.InvalidArgument, "process_id must be a canonical lowercase UUID")
	}
	if _, err := os.Lstat(s.Dir(id)); err != nil {
		return errcode.New(errcode.NotFound, "no managed job has this process_id")
	}
	return nil
}

// withLock runs fn holding the admission lock.
func (s *Store) withLock(fn func() error) error {
	f, err := os.OpenFile(filepath.Join(s.root, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("open admission lock: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("take admission lock: %w", err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return fn()
}

// ids lists the job IDs on disk.
func (s *Store) ids() ([]string, error) {
	entries, err := os.ReadDir(s.root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && jobmeta.ValidID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// List returns every job's record, newest first. Corrupt jobs are listed as
// such; nothing is skipped or deleted.
func (s *Store) List() ([]*jobmeta.Record, error) {
	ids, err := s.ids()
	if err != nil {
		return nil, err
	}
	recs := make([]*jobmeta.Record, 0, len(ids))
	for _, id := range ids {
		r, err := s.record(id)
		if errors.Is(err, os.ErrNotExist) {
			continue // forgotten or being created meanwhile
		}
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	sortNewestFirst(recs)
	return recs, nil
}

// sortNewestFirst orders records by creation, newest first.
func sortNewestFirst(recs []*jobmeta.Record) {
	sort.SliceStable(recs, func(i, j int) bool {
		if !recs[i].CreatedAt.Equal(recs[j].CreatedAt) {
			return recs[i].CreatedAt.After(recs[j].CreatedAt)
		}
		return recs[i].ProcessID > recs[j].ProcessID
	})
}

// Get returns one job's record.
func (s *Store) Get(id string) (*jobmeta.Record, error) {
	if err := s.checkID(id); err != nil {
		return nil, err
	}
	r, err := s.record(id)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotFound()
	}
	return r, err
}

// ErrNotFound is the answer for a job that does not exist, or that the
// caller may not see: the two must be indistinguishable.
func ErrNotFound() error {
	return errcode.New(errcode.NotFound, "no managed job has this process_id")
}

// KeyTaken is Admit's answer for a job whose idempotency key another job
// of the same owner holds.
type KeyTaken struct {
	// ID is the job holding the key; Request its request digest.
	ID, Request string
}

func (k *KeyTaken) Error() string { return "the idempotency key started job " + k.ID }

// holds reports whether a job of owner with idempotency digests k holds
// the key whose digest is key for who.
func holds(owner string, k *jobmeta.Idempotency, who, key string) bool {
	return k != nil && k.Key == key && owner == who
}

// keyHolder returns the job among recs that owner started with the key
// whose digest is key, or nil.
func keyHolder(recs []*jobmeta.Record, owner, key string) *KeyTaken {
	for _, r := range recs {
		if holds(r.Owner, r.Idempotency, owner, key) {
			return &KeyTaken{ID: r.ProcessID, Request: r.Idempotency.Request}
		}
	}
	return nil
}

// Keyed returns the job owner started with the idempotency key whose
// digest is key, or nil. Admit decides under its lock; this is the look
// that spares a repeat the launch path, reading the index and the launch
// record of each job not in it.
func (s *Store) Keyed(owner, key string) (*KeyTaken, error) {
	ids, err := s.ids()
	if err != nil {
		return nil, err
	}
	idx := s.readIndex()
	for _, id := range ids {
		if e, ok := idx.Jobs[id]; ok {
			if holds(e.Owner, e.Idempotency, owner, key) {
				return &KeyTaken{ID: id, Request: e.Idempotency.Request}, nil
			}
			continue
		}
		// A job being created, forgotten meanwhile or corrupt has no key
		// to read.
		if j, err := s.launch(id); err == nil && holds(j.Owner, j.Idempotency, owner, key) {
			return &KeyTaken{ID: id, Request: j.Idempotency.Request}, nil
		}
	}
	return nil, nil
}

// Admit reserves a live slot for a new job and writes its launch record,
// then creates its directory with job.json, after pruning retention. j.ID
// must be set. A job whose idempotency key its owner already used is not
// admitted: the answer is a *KeyTaken naming the job that holds it.
func (s *Store) Admit(j *jobmeta.Job) error {
	return s.admit(j, func(dir string) error {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fmt.Errorf("create job directory: %w", err)
		}
		if err := writeJobCopy(dir, j); err != nil {
			os.RemoveAll(dir)
			return err
		}
		return nil
	})
}

// writeJobCopy writes j as the job.json of the new job directory dir: the
// supervisor's copy, which tells it a job's directory from a spare's. Not
// synced: it is never read back as evidence, and after a crash no
// supervisor of this boot remains to read it.
func writeJobCopy(dir string, j *jobmeta.Job) error {
	data, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("encode job metadata: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, jobmeta.JobFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("write job metadata: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write job metadata: %w", err)
	}
	return nil
}

// admit decides on j's admission under the admission lock and, admitted,
// writes its launch record (with the boot it is admitted in), then has
// place write its job.json into dir. A record is written before its
// directory exists and removed after it, so a directory without one is
// a spare's, one being created or an earlier build's (launch.go).
func (s *Store) admit(j *jobmeta.Job, place func(dir string) error) error {
	if !jobmeta.ValidID(j.ID) {
		return fmt.Errorf("admit: invalid job id")
	}
	if j.BootID == "" {
		j.BootID, _ = s.procs.BootID()
	}
	return s.withLock(func() error {
		recs, err := s.admissionRecords()
		if err != nil {
			return err
		}
		if j.Idempotency != nil {
			if k := keyHolder(recs, j.Owner, j.Idempotency.Key); k != nil {
				return k
			}
		}
		live := 0
		for _, r := range recs {
			if r.State.Live() {
				live++
			}
		}
		if live >= limits.MaxLiveJobs {
			return errcode.New(errcode.JobTableFull,
				"%d managed jobs are already live (the limit); poll them with process.status or stop one with process.stop, then retry", live)
		}
		if err := s.prune(recs); err != nil {
			return err
		}
		if err := s.writeLaunch(j); err != nil {
			return err
		}
		if err := place(s.Dir(j.ID)); err != nil {
			os.Remove(s.launchPath(j.ID))
			return err
		}
		return nil
	})
}

// prune applies retention (docs/limits.md) to recs, newest first: expired
// terminal jobs go first, then the oldest read ones until there is room
// for one more. Unread terminal jobs are never discarded to make room.
// What it discards leaves the table at once and its files once swept
// (discard).
func (s *Store) prune(recs []*jobmeta.Record) error {
	now := s.Now()
	var kept []*jobmeta.Record
	for _, r := range recs {
		if !r.State.Terminal() {
			continue
		}
		if now.Sub(endTime(r)) > limits.TerminalJobRetention {
			if err := s.discard(r.ProcessID); err != nil {
				return err
			}
			continue
		}
		kept = append(kept, r)
	}
	// kept is newest first; remove read jobs from the oldest end.
	for i := len(kept) - 1; i >= 0 && len(kept) >= limits.MaxRetainedTerminalJobs; i-- {
		if !kept[i].Read {
			continue
		}
		if err := s.discard(kept[i].ProcessID); err != nil {
			return err
		}
		kept = append(kept[:i], kept[i+1:]...)
	}
	if len(kept) >= limits.MaxRetainedTerminalJobs {
		return errcode.New(errcode.RetentionFull,
			"%d finished jobs have unread final output; read it with process.output or discard jobs with process.forget, then retry", len(kept))
	}
	return nil
}

// endTime is when a terminal job ended, as well as it is known.
func endTime(r *jobmeta.Record) time.Time {
	switch {
	case r.CompletedAt != nil:
		return *r.CompletedAt
	case r.ReconciledAt != nil:
		return *r.ReconciledAt
	}
	return r.CreatedAt
}

func (s *Store) remove(id string) error {
	if !jobmeta.ValidID(id) {
		return fmt.Errorf("remove: invalid job id")
	}
	if err := os.RemoveAll(s.Dir(id)); err != nil {
		return fmt.Errorf("remove job: %w", err)
	}
	// The record last: a directory is never left without it.
	for _, p := range []string{s.endedPath(id), s.launchPath(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove job: %w", err)
		}
	}
	return nil
}

// discardedPrefix names, in the jobs directory, a job's directory that
// retention took out of the table and whose files are being removed: not
// a job ID, so no listing sees it.
const discardedPrefix = ".discarded-"

// discard takes terminal job id out of the table at once, its directory
// renamed aside, and leaves the removal of its files to Sweep: a launch
// into a full table neither waits for a dozen unlinks nor has them share
// the disk with its own writes. A crash leaves the directory aside, which
// the next Open removes.
func (s *Store) discard(id string) error {
	if !jobmeta.ValidID(id) {
		return fmt.Errorf("remove: invalid job id")
	}
	if err := os.Rename(s.Dir(id), filepath.Join(s.root, discardedPrefix+id)); err != nil {
		return fmt.Errorf("remove job: %w", err)
	}
	s.asideMu.Lock()
	s.aside = append(s.aside, id)
	s.asideMu.Unlock()
	return nil
}

// Sweep starts removing the files of the jobs retention discarded, off
// the caller's path: the launcher calls it once its launch has answered.
func (s *Store) Sweep() {
	s.asideMu.Lock()
	ids := s.aside
	s.aside = nil
	s.asideMu.Unlock()
	if len(ids) == 0 {
		return
	}
	s.discards.Add(1)
	go func() {
		defer s.discards.Done()
		for _, id := range ids {
			s.removeAside(id, filepath.Join(s.root, discardedPrefix+id))
		}
		// Committed here, not by the next launch's first fsync. Best
		// effort: a removal lost in a crash is redone by Open.
		for _, dir := range []string{s.root, s.launches} {
			atomicfile.SyncDir(dir)
		}
	}()
}

// removeAside removes a discarded job's directory, then its records.
func (s *Store) removeAside(id, aside string) {
	if os.RemoveAll(aside) != nil {
		return
	}
	for _, p := range []string{s.endedPath(id), s.launchPath(id)} {
		os.Remove(p)
	}
}

// removeDiscarded removes what discards a process did not finish.
func (s *Store) removeDiscarded() {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if id, ok := strings.CutPrefix(e.Name(), discardedPrefix); ok && jobmeta.ValidID(id) {
			s.removeAside(id, filepath.Join(s.root, e.Name()))
		}
	}
}

// Settle removes the files of the jobs retention discarded and waits
// until they are gone.
func (s *Store) Settle() {
	s.Sweep()
	s.discards.Wait()
}

// MarkLaunchFailed records that the launch of id was abandoned, releasing
// its live slot. The job is marked read: there is no output to wait for.
func (s *Store) MarkLaunchFailed(id, reason string) error {
	if err := s.checkID(id); err != nil {
		return err
	}
	j, err := s.launch(id)
	if err != nil {
		return fmt.Errorf("read launch record: %w", err)
	}
	s.forgetRunning(id)
	now := s.Now()
	j.LaunchFailed = true
	j.LaunchError = reason
	j.FailedAt = &now
	if err := s.writeLaunch(j); err != nil {
		return err
	}
	return s.MarkRead(id)
}

// MarkRead records that the final output page of id was read.
func (s *Store) MarkRead(id string) error {
	p := s.file(id, jobmeta.ReadMarkFile)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	return atomicfile.WriteJSON(p, &jobmeta.ReadMark{Schema: jobmeta.SchemaVersion, ReadAt: s.Now()})
}

// Forget deletes a terminal job's metadata and output, durably: a job
// forgotten stays forgotten after a crash, and the next launch does not
// pay for committing the removal.
func (s *Store) Forget(id string) (*jobmeta.Record, error) {
	r, err := s.Get(id)
	if err != nil {
		return nil, err
	}
	if !r.Terminal {
		if r.State == jobmeta.Corrupt {
			return nil, errcode.New(errcode.InvalidArgument, "the job's metadata is corrupt; the machine's owner can inspect it with `commandcore jobs`")
		}
		return nil, errcode.New(errcode.InvalidArgument, "the job is still %s; stop it with process.stop and wait until it is terminal", r.State)
	}
	if err := s.withLock(func() error { return s.remove(id) }); err != nil {
		return nil, err
	}
	for _, dir := range []string{s.root, s.launches} {
		if err := atomicfile.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("forget job: %w", err)
		}
	}
	return r, nil
}
