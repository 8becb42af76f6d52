package jobstore

import (
	"sync"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/procid"
)

// running remembers, between admissions, the live jobs whose supervisor
// the launcher recorded, so a launch into a table of live jobs costs one
// read of /proc per job rather than a derivation of each. The recorded
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
// supervisor whose life is the job's.
type runningJob struct {
	supervisor procid.Identity
	record     jobmeta.Record
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
	if alive, err := s.procs.Alive(j.supervisor); err != nil || !alive {
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
	s.running.mu.Lock()
	defer s.running.mu.Unlock()
	if s.running.jobs == nil {
		s.running.jobs = map[string]runningJob{}
	}
	s.running.jobs[r.ProcessID] = runningJob{
		supervisor: *f.job.Supervisor,
		record: jobmeta.Record{ProcessID: r.ProcessID, Owner: r.Owner, State: r.State,
			CreatedAt: r.CreatedAt, Idempotency: r.Idempotency},
	}
}

// forgetRunning drops job id from what is remembered: its supervisor is
// gone, or its launch record changed.
func (s *Store) forgetRunning(id string) {
	s.running.mu.Lock()
	delete(s.running.jobs, id)
	s.running.mu.Unlock()
}
