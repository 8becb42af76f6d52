package jobstore

import (
	"sync"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/procid"
)

// running remembers, between admissions, the live jobs whose supervisor
// the launcher recorded, so a launch into a table of live jobs costs one
// poll of a pidfd per job rather than a derivation of each. The recorded
// supervisor is evidence no job can forge (launch.go): while it runs, no
// end in the job's directory is believed, so the job is live whatever its
// files say. Its entry goes once that supervisor is gone, and the job is
// derived again.
type running struct {
	mu   sync.Mutex
	jobs map[string]runningJob
}

// runningJob is what admission needs of a live job: its owner and
// idempotency key (the launch record's, which never change) and the
// supervisor whose life is the job's, pinned.
type runningJob struct {
	pin    *procid.Pin
	record jobmeta.Record
}

// stillLive returns the remembered record of job id while its recorded
// supervisor is alive, and forgets the job otherwise.
func (s *Store) stillLive(id string) (*jobmeta.Record, bool) {
	s.running.mu.Lock()
	j, ok := s.running.jobs[id]
	s.running.mu.Unlock()
	if !ok {
		return nil, false
	}
	// A pin closed meanwhile (the job forgotten) answers with an error:
	// the job is derived then.
	if exited, err := j.pin.Exited(); err != nil || exited {
		s.forgetRunning(id)
		return nil, false
	}
	r := j.record
	return &r, true
}

// rememberRunning keeps what admission needs of a job derived live whose
// supervisor the launcher recorded.
func (s *Store) rememberRunning(r *jobmeta.Record, f *files) {
	if !r.State.Live() || f.job.Supervisor == nil || f.job.LaunchFailed {
		return
	}
	// Gone since it was derived, or not to be pinned: derived again.
	pin, err := s.procs.Pin(*f.job.Supervisor)
	if err != nil {
		return
	}
	j := runningJob{
		pin: pin,
		record: jobmeta.Record{ProcessID: r.ProcessID, Owner: r.Owner, State: r.State,
			CreatedAt: r.CreatedAt, Idempotency: r.Idempotency},
	}
	s.running.mu.Lock()
	defer s.running.mu.Unlock()
	if s.running.jobs == nil {
		s.running.jobs = map[string]runningJob{}
	}
	if old, ok := s.running.jobs[r.ProcessID]; ok {
		old.pin.Close()
	}
	s.running.jobs[r.ProcessID] = j
}

// forgetRunning drops job id from what is remembered: its supervisor is
// gone, or its launch record changed.
func (s *Store) forgetRunning(id string) {
	s.running.mu.Lock()
	j, ok := s.running.jobs[id]
	delete(s.running.jobs, id)
	s.running.mu.Unlock()
	if ok {
		j.pin.Close()
	}
}
