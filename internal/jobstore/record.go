package jobstore

import (
	"errors"
	"os"
	"time"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/capture"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/reconcile"
)

// files is everything read of one job: its launch record and the files of
// its directory.
type files struct {
	// job is the launch record, never the directory's job.json.
	job        *jobmeta.Job
	claim      *jobmeta.Claim
	result     *jobmeta.Result
	stop       *jobmeta.StopRequest
	read       *jobmeta.ReadMark
	reconciled *jobmeta.Reconciled
	// gone is whether the job's processes are known to be gone, once
	// asked (ended).
	gone *bool
	// unit is what the user manager holds of the job's unit, once asked
	// (unitEvidence).
	unit      *reconcile.UnitEvidence
	unitErr   error
	unitAsked bool
}

// readOptional reads a metadata file that may legitimately be absent.
func readOptional[T any, P interface {
	*T
	jobmeta.Versioned
}](d *jobmeta.Dir, name string) (*T, error) {
	v, err := jobmeta.ReadIn[T, P](d, name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return v, err
}

// load reads job id's launch record and the files of its open directory d.
func (s *Store) load(id string, d *jobmeta.Dir) (*files, error) {
	var f files
	var err error
	if f.job, err = s.launch(id); err != nil {
		return nil, err
	}
	// The terminal record is read before anything the supervisor writes
	// earlier, so a job is never seen as terminal with a stale claim.
	if f.result, err = readOptional[jobmeta.Result](d, jobmeta.ResultFile); err != nil {
		return nil, err
	}
	if f.claim, err = jobmeta.ReadClaimIn(d); errors.Is(err, os.ErrNotExist) {
		f.claim = nil
	} else if err != nil {
		return nil, err
	}
	if f.stop, err = readOptional[jobmeta.StopRequest](d, jobmeta.StopFile); err != nil {
		return nil, err
	}
	if f.read, err = readOptional[jobmeta.ReadMark](d, jobmeta.ReadMarkFile); err != nil {
		return nil, err
	}
	if f.reconciled, err = readOptional[jobmeta.Reconciled](d, jobmeta.ReconciledFile); err != nil {
		return nil, err
	}
	return &f, nil
}

// loadID is load of job id's directory.
func (s *Store) loadID(id string) (*files, error) {
	d, err := s.OpenDir(id)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return s.load(id, d)
}

// record derives the record of job id. A missing job.json returns
// os.ErrNotExist; unreadable metadata yields a record in state corrupt.
func (s *Store) record(id string) (*jobmeta.Record, error) { return s.derive(id, true) }

// derive is record; without full it leaves out what a summary does not
// show (capture counters, a fallback job's survivors), which costs reads
// of the capture files and of /proc.
func (s *Store) derive(id string, full bool) (*jobmeta.Record, error) {
	r, _, err := s.deriveFiles(id, full)
	return r, err
}

// deriveFiles is derive that also returns what was read of the job: none
// for a corrupt one.
func (s *Store) deriveFiles(id string, full bool) (*jobmeta.Record, *files, error) {
	d, err := s.OpenDir(id)
	var f *files
	if err == nil {
		defer d.Close()
		f, err = s.load(id, d)
	}
	if errors.Is(err, os.ErrNotExist) {
		// Only the launch record is mandatory. A directory without one is
		// a spare's, is being created under the admission lock, or was
		// damaged.
		if fi, serr := os.Stat(s.Dir(id)); serr == nil && s.Now().Sub(fi.ModTime()) > orphanAfter && !s.isSpare(id) {
			return s.corrupt(id), nil, nil
		}
		return nil, nil, err
	}
	if err != nil {
		return s.corrupt(id), nil, nil
	}
	r := recordOf(id, f)
	r.State = s.classify(d, id, f, r)
	r.Terminal = r.State.Terminal()
	if full && r.Terminal && f.job.FailureDomain == jobmeta.DomainSharedParentCgroup && f.claim != nil && f.claim.Child != nil {
		// No unit cleans up after a fallback job: report what is left.
		r.Survivors, _ = s.procs.GroupSurvivors(*f.claim.Child)
	}
	if full {
		r.Capture = captureOf(d, f)
	}
	ended(r, f)
	if r.Terminal && s.final(id) {
		// Kept for the index, so that the next launch need not derive
		// again the job a reader has just seen end.
		s.keepPending(id, entryOf(r))
	}
	return r, f, nil
}

// recordOf is what job id's files say of it before its state is
// classified: the launch record, a stop request, the supervisor's claim.
func recordOf(id string, f *files) *jobmeta.Record {
	r := &jobmeta.Record{
		ProcessID:     id,
		Name:          f.job.Name,
		Owner:         f.job.Owner,
		Unit:          f.job.Unit,
		FailureDomain: f.job.FailureDomain,
		CreatedAt:     f.job.CreatedAt,
		TimeoutS:      f.job.TimeoutS,
		Stdin:         f.job.Stdin,
		PTY:           f.job.PTY,
		Read:          f.read != nil,
		Schema:        f.job.Schema,
		Idempotency:   f.job.Idempotency,
	}
	if f.stop != nil {
		t := f.stop.RequestedAt
		r.StopRequestAt = &t
	}
	if id := f.claim; id != nil {
		r.StartedAt = id.StartedAt
		r.Claim = &jobmeta.ClaimView{
			Supervisor: id.Supervisor, Child: id.Child, BootID: id.BootID,
			InvocationID: id.InvocationID, Manager: id.Manager,
		}
	}
	return r
}

// ended adds to r how its job ended, as its result (or its failed launch)
// and a reconciliation say.
func ended(r *jobmeta.Record, f *files) {
	if res := f.result; res != nil {
		t := res.CompletedAt
		r.CompletedAt = &t
		r.ExitCode = res.ExitCode
		r.Signal = res.Signal
		r.Error = res.StartError
		switch {
		case res.StopRequested:
			r.StoppedBy = "request"
		case res.TimedOut:
			r.StoppedBy = "timeout"
		case res.StoppedByManager:
			r.StoppedBy = "service_manager"
		}
	}
	if f.job.LaunchFailed && r.State == jobmeta.LaunchFailed && f.result == nil {
		r.Error = f.job.LaunchError
	}
	if rc := f.reconciled; rc != nil {
		t := rc.ReconciledAt
		r.ReconciledAt = &t
	}
}

func (s *Store) corrupt(id string) *jobmeta.Record {
	r := &jobmeta.Record{ProcessID: id, State: jobmeta.Corrupt, Error: "metadata_corrupt"}
	if fi, err := os.Stat(s.Dir(id)); err == nil {
		r.CreatedAt = fi.ModTime().UTC()
	}
	return r
}

// classify decides the state of a job, persisting a conclusion drawn from
// evidence (reconciled.json) so that it never changes afterwards. The job
// can write every file of its directory, so no end found there is
// believed until its processes are known to be gone (ended): until then a
// job is live, whatever its files say.
func (s *Store) classify(d *jobmeta.Dir, id string, f *files, r *jobmeta.Record) jobmeta.State {
	// The supervisor's records win over the launcher's: a launch given up
	// on (a missed READY, a lost start-job reply) may have run all the same.
	switch {
	case f.result != nil && s.ended(id, f):
		return s.classifyResult(f)
	case f.reconciled != nil && s.ended(id, f):
		return f.reconciled.State
	case f.abandoned() && s.ended(id, f):
		return reconcile.Classify(reconcile.Evidence{LaunchAbandoned: true, Claim: f.claim}).State
	case f.claim == nil:
		if s.Now().Sub(f.job.CreatedAt) < orphanAfter || !s.ended(id, f) {
			return jobmeta.Starting
		}
		s.conclude(id, f, reconcile.Verdict{State: jobmeta.LaunchFailed, Evidence: "no_identity_claim"})
		return jobmeta.LaunchFailed
	}
	e := reconcile.Evidence{Claim: f.claim, StopRequested: f.stop != nil, TimeLimited: f.job.TimeoutS > 0}
	// The supervisor's deadline is its claim's start plus the limit.
	e.TimeLimitPassed = e.TimeLimited && f.claim.StartedAt != nil &&
		!s.Now().Before(f.claim.StartedAt.Add(time.Duration(f.job.TimeoutS)*time.Second))
	e.BootID, _ = s.procs.BootID()
	e.SupervisorAlive, _ = s.procs.Alive(f.claim.Supervisor)
	if m := f.claim.Manager; m != nil {
		alive, err := s.procs.Alive(*m)
		if err == nil {
			e.ManagerAlive = &alive
		}
	}
	if !e.SupervisorAlive {
		e.Unit, _ = s.unitEvidence(f)
	}
	v := reconcile.Classify(e)
	if !v.State.Terminal() {
		if e.ManagerAlive != nil && !*e.ManagerAlive {
			r.Warnings = append(r.Warnings, jobmeta.WarnUserManagerGone)
		}
		return v.State
	}
	if !s.ended(id, f) {
		// The claim says gone, the evidence that counts does not.
		if f.stop != nil {
			return jobmeta.Stopping
		}
		return jobmeta.Running
	}
	// The supervisor may have published its record after we looked.
	if res, err := readOptional[jobmeta.Result](d, jobmeta.ResultFile); err == nil && res != nil {
		f.result = res
		return s.classifyResult(f)
	}
	if s.conclude(id, f, v) && e.Unit != nil && s.ResetUnit != nil {
		// Evidence read and persisted: the failed unit may go now.
		s.ResetUnit(id, f.job.Unit)
	}
	return v.State
}

// abandoned reports a launch its launcher gave up on whose shell never
// ran: job.json holds its end, nothing the unit retained.
func (f *files) abandoned() bool {
	return f.job.LaunchFailed && (f.claim == nil || f.claim.Child == nil)
}

// ReleaseUnit resets unit, the failed unit of job id, once nothing more is
// to be read from it: the job's end is on disk (the supervisor's terminal
// record or an abandoned launch, which need nothing of the unit, or a
// reconciled record, which persisted what it did), or the job is gone. A
// job whose supervisor was lost without a record is derived instead: that
// reads the unit's evidence, persists the conclusion and then resets the
// unit (classify), or leaves it for a later look.
func (s *Store) ReleaseUnit(id, unit string) {
	if s.ResetUnit == nil || !jobmeta.ValidID(id) {
		return
	}
	f, err := s.loadID(id)
	switch {
	case err == nil && (f.result != nil || f.reconciled != nil || f.abandoned()):
	case err == nil:
		s.derive(id, false)
		return
	case errors.Is(err, os.ErrNotExist):
		if _, err := os.Lstat(s.Dir(id)); !errors.Is(err, os.ErrNotExist) {
			// Being created, or damaged: keep what the unit retained.
			return
		}
	default:
		return
	}
	s.ResetUnit(id, unit)
}

// classifyResult classifies a job with a terminal record. A stop by the
// service manager is judged against the boot and manager as they are now.
func (s *Store) classifyResult(f *files) jobmeta.State {
	e := reconcile.Evidence{Result: f.result, Claim: f.claim}
	if f.result.StoppedByManager && f.claim != nil {
		e.BootID, _ = s.procs.BootID()
		if m := f.claim.Manager; m != nil {
			if alive, err := s.procs.Alive(*m); err == nil {
				e.ManagerAlive = &alive
			}
		}
	}
	return reconcile.Classify(e).State
}

// conclude persists a verdict and reports whether it reached the disk.
// Persisting is best effort: an unwritable store must not hide the
// conclusion from the caller.
func (s *Store) conclude(id string, f *files, v reconcile.Verdict) bool {
	rc := &jobmeta.Reconciled{Schema: jobmeta.SchemaVersion, State: v.State, ReconciledAt: s.Now(), Evidence: v.Evidence}
	f.reconciled = rc
	if atomicfile.WriteJSON(s.file(id, jobmeta.ReconciledFile), rc) != nil {
		return false
	}
	if s.OnReconciled != nil {
		s.OnReconciled(id, v.State)
	}
	return true
}

// captureOf returns the capture metadata: the sealed counters of the
// terminal record, or the capture files' headers, which for a lost
// supervisor are lower bounds (complete stays false unless EOF was sealed).
func captureOf(d *jobmeta.Dir, f *files) *jobmeta.Capture {
	if f.result != nil {
		c := f.result.Capture
		return &c
	}
	return &jobmeta.Capture{
		Stdout: streamCapture(d, jobmeta.StdoutFile),
		Stderr: streamCapture(d, jobmeta.StderrFile),
	}
}

func streamCapture(d *jobmeta.Dir, name string) jobmeta.StreamCapture {
	f, err := d.Open(name)
	if err != nil {
		// Unknown, not zero: nothing trustworthy was published.
		return jobmeta.StreamCapture{}
	}
	defer f.Close()
	m, err := capture.ReadMeta(f)
	if err != nil {
		return jobmeta.StreamCapture{}
	}
	return jobmeta.StreamCaptureOf(m)
}
