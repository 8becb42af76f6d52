package jobstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/reconcile"
)

// A job's processes run as the agent's user and can write its directory,
// so nothing there decides whose a job is, whether it counts toward
// admission, whether a retried start is the same job, or whether it has
// ended. Those facts are in the job's launch record, <state-dir>/launches/
// <id>.json, which the launcher writes at admission: job units see the
// state directory covered but for their own job directory (package
// launcher, hideexec), so no job reaches it. The job.json in the job
// directory is a copy for the supervisor, never read back.

// launchesDir holds the launch records, and the locks of spares.
const launchesDir = "launches"

func (s *Store) launchPath(id string) string { return filepath.Join(s.launches, id+".json") }

// spareLockPath is the lock a process keeping spare id holds.
func (s *Store) spareLockPath(id string) string { return filepath.Join(s.launches, id+".spare") }

// writeLaunch publishes j as its job's launch record.
func (s *Store) writeLaunch(j *jobmeta.Job) error {
	if err := atomicfile.WriteJSON(s.launchPath(j.ID), j); err != nil {
		return fmt.Errorf("write launch record: %w", err)
	}
	return nil
}

// Launch returns the launch record of job id: whose it is, its unit, and
// what the agent saw of its supervisor. A missing job matches
// os.ErrNotExist.
func (s *Store) Launch(id string) (*jobmeta.Job, error) {
	if !jobmeta.ValidID(id) {
		return nil, fmt.Errorf("launch record: invalid job id")
	}
	return s.launch(id)
}

func (s *Store) launch(id string) (*jobmeta.Job, error) {
	j, err := jobmeta.Read[jobmeta.Job](s.launchPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return s.adopt(id)
	}
	if err == nil && j.ID != id {
		return nil, fmt.Errorf("%w: launch record of another job", jobmeta.ErrCorrupt)
	}
	return j, err
}

// adopt takes over the job.json an earlier build left as the only record
// of job id, the first time this build sees the job, with the claim its
// supervisor had then as the supervisor's identity. This build writes a
// job's launch record before its directory exists and removes it only
// after the directory, so only an earlier build's job is ever adopted:
// what that job wrote before the upgrade is believed, as that build
// believed it; nothing it writes afterwards is.
func (s *Store) adopt(id string) (*jobmeta.Job, error) {
	d, err := s.OpenDir(id)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	j, err := jobmeta.ReadIn[jobmeta.Job](d, jobmeta.JobFile)
	if err != nil {
		return nil, err
	}
	if j.ID != id {
		return nil, fmt.Errorf("%w: job.json of another job", jobmeta.ErrCorrupt)
	}
	j.Adopted, j.Supervisor, j.BootID = true, nil, ""
	if c, err := jobmeta.ReadClaimIn(d); err == nil {
		sup := c.Supervisor
		j.Supervisor, j.BootID = &sup, c.BootID
	}
	data, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("encode launch record: %w", err)
	}
	if err := os.MkdirAll(s.launches, 0o700); err != nil {
		// Unwritable: this look believes the adoption all the same.
		return j, nil
	}
	if err := atomicfile.Create(s.launchPath(id), data, 0o600); errors.Is(err, fs.ErrExist) {
		// Admitted or adopted meanwhile: that record is the one.
		return jobmeta.Read[jobmeta.Job](s.launchPath(id))
	}
	return j, nil
}

// RecordSupervisor records sup, the supervisor the launcher started for
// job id outside any unit (the fallback), as the process whose life is
// the job's.
func (s *Store) RecordSupervisor(id string, sup procid.Identity) error {
	j, err := s.Launch(id)
	if err != nil {
		return err
	}
	j.Supervisor = &sup
	s.forgetRunning(id)
	return s.writeLaunch(j)
}

// gone reports whether the processes of the job whose files are f are
// known to be gone, from evidence no job can forge: another boot, the
// supervisor the agent recorded no longer alive, or, with none recorded,
// its unit no longer active (asked of the user manager). Only then are the
// ends a job directory holds (result.json, reconciled.json, a launch given
// up on) believed. cheap reports evidence a later look reads again for
// less than a mark costs to make: a recorded supervisor, a launch given
// up on before any supervisor.
func (s *Store) gone(f *files) (gone, cheap bool) {
	j := f.job
	if boot, err := s.procs.BootID(); err == nil && j.BootID != "" && j.BootID != boot {
		return true, false
	}
	if j.LaunchFailed && (j.LaunchError == jobmeta.LaunchErrPipe || j.LaunchError == jobmeta.LaunchErrUnit) {
		// Given up on before any supervisor was started.
		return true, true
	}
	if j.Supervisor != nil {
		// Read of /proc, not asked of the manager: a unit's supervisor is
		// its main process, and the unit ends what is left once it exits.
		alive, err := s.procs.Alive(*j.Supervisor)
		return err == nil && !alive, true
	}
	if ev, err := s.unitEvidence(f); err == nil {
		return ev == nil || !ev.Settling, false
	}
	switch {
	case j.Adopted:
		// An earlier build's job without a claim, which its files decide
		// as they did for that build.
		return true, false
	case j.Unit == "":
		// A fallback launch whose supervisor is not on record: given up
		// on, or its launcher gone before it recorded one, once a launch
		// is over.
		return j.LaunchFailed || s.Now().Sub(j.CreatedAt) >= orphanAfter, false
	}
	// A unit nobody could ask about.
	return false, false
}

// errNoUnit is unitEvidence's answer for a job nobody can ask about.
var errNoUnit = errors.New("no unit to ask about")

// unitEvidence asks the user manager, once per look, what it holds of the
// job's unit: nil when it is not loaded.
func (s *Store) unitEvidence(f *files) (*reconcile.UnitEvidence, error) {
	if !f.unitAsked {
		f.unitAsked = true
		f.unit, f.unitErr = nil, errNoUnit
		if f.job.Unit != "" && s.UnitEvidence != nil {
			f.unit, f.unitErr = s.UnitEvidence(f.job.Unit)
		}
	}
	return f.unit, f.unitErr
}

// endedPath marks that job id's processes were seen gone: from then on
// gone is not asked again. A mark of its own, not a field of the launch
// record, so that no look rewrites the record its launcher may be
// updating. Lost in a crash, it is only asked for again.
func (s *Store) endedPath(id string) string { return filepath.Join(s.launches, id+".ended") }

// ended is gone for job id, whose files are f, asked at most once per
// look and, once true, marked unless the evidence was cheap (gone): the
// mark's creation, a launch into a full table would pay for every job that
// ended since the last, costs more than a read of /proc.
func (s *Store) ended(id string, f *files) bool {
	if f.gone == nil {
		_, err := os.Lstat(s.endedPath(id))
		g := err == nil
		if !g {
			var cheap bool
			if g, cheap = s.gone(f); g && !cheap {
				if m, err := os.OpenFile(s.endedPath(id), os.O_WRONLY|os.O_CREATE|unix.O_NOFOLLOW, 0o600); err == nil {
					m.Close()
				}
			}
		}
		f.gone = &g
	}
	return *f.gone
}
