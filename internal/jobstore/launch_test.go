package jobstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/reconcile"
)

// launchFile is where job jid's launch record is.
func (f *fixture) launchFile(jid string) string {
	return filepath.Join(f.state, "launches", jid+".json")
}

// rewriteJobFile rewrites job jid's job.json as edit makes it, as the job
// itself can.
func (f *fixture) rewriteJobFile(jid string, edit func(j *jobmeta.Job)) {
	f.t.Helper()
	j, err := jobmeta.Read[jobmeta.Job](filepath.Join(f.st.Dir(jid), jobmeta.JobFile))
	if err != nil {
		f.t.Fatal(err)
	}
	edit(j)
	f.write(jid, jobmeta.JobFile, j)
}

// TestAdmissionWritesTheLaunchRecord: admission writes the launch record
// (owner-only, with the boot it was admitted in) and the supervisor's copy
// in job.json; what the job then writes in job.json, or its removal,
// changes neither the owner, the key, the unit nor the listing.
func TestAdmissionWritesTheLaunchRecord(t *testing.T) {
	f := newFixture(t)
	keyA := strings.Repeat("a", 64)
	j := f.keyed(id(1), "tok_alice", keyA)
	j.Unit = "commandcore-job-x-" + id(1) + ".service"
	if err := f.st.Admit(j); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(f.launchFile(id(1)))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("launch record: %v, %v; want 0600", fi, err)
	}
	rec, err := f.st.Launch(id(1))
	if err != nil || rec.Owner != "tok_alice" || rec.BootID != f.bootID || rec.Unit != j.Unit || rec.Adopted {
		t.Fatalf("launch record %+v, %v", rec, err)
	}
	if cp, err := jobmeta.Read[jobmeta.Job](filepath.Join(f.st.Dir(id(1)), jobmeta.JobFile)); err != nil || cp.Owner != "tok_alice" {
		t.Fatalf("the supervisor's copy: %+v, %v", cp, err)
	}
	f.rewriteJobFile(id(1), func(j *jobmeta.Job) {
		j.Owner, j.Unit = "tok_bob", ""
		j.Idempotency.Key = strings.Repeat("c", 64)
	})
	if r := f.get(id(1)); r.Owner != "tok_alice" || r.Unit != j.Unit {
		t.Fatalf("after the job rewrote job.json: owner %q unit %q", r.Owner, r.Unit)
	}
	if k, err := f.st.Keyed("tok_bob", strings.Repeat("c", 64)); err != nil || k != nil {
		t.Fatalf("a key the job wrote: %+v, %v", k, err)
	}
	if k, err := f.st.Keyed("tok_alice", keyA); err != nil || k == nil || k.ID != id(1) {
		t.Fatalf("the key it was started with: %+v, %v", k, err)
	}
	if err := os.Remove(filepath.Join(f.st.Dir(id(1)), jobmeta.JobFile)); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(time.Hour)
	if recs, err := f.st.List(); err != nil || len(recs) != 1 || recs[0].Owner != "tok_alice" {
		t.Fatalf("without job.json: %d records, %v", len(recs), err)
	}
	// Forgotten, the job leaves neither its directory nor its record.
	code := 0
	f.write(id(1), jobmeta.ResultFile, &jobmeta.Result{Schema: 1, ExitCode: &code, CompletedAt: f.now})
	if _, err := f.st.Forget(id(1)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.st.Dir(id(1)), f.launchFile(id(1)), filepath.Join(f.state, "launches", id(1)+".ended")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after forget: %v", p, err)
		}
	}
	if _, err := f.st.Launch("../x"); err == nil {
		t.Error("Launch of an invalid ID succeeded")
	}
}

// TestEndBelievedOnlyOnceGone: a result.json is believed only when the
// job's recorded supervisor is gone, or without one its unit is no longer
// active (asked at each look until then, then marked), or it was admitted
// in another boot.
func TestEndBelievedOnlyOnceGone(t *testing.T) {
	f := newFixture(t)
	unit := "commandcore-job-x-" + id(1) + ".service"
	settling := true
	asked := 0
	f.st.UnitEvidence = func(string) (*reconcile.UnitEvidence, error) {
		asked++
		if settling {
			return &reconcile.UnitEvidence{Settling: true}, nil
		}
		return nil, nil
	}
	j := f.newJob(id(1))
	j.Unit, j.FailureDomain, j.Supervisor = unit, jobmeta.DomainSystemdUnit, nil
	if err := f.st.Admit(j); err != nil {
		t.Fatal(err)
	}
	f.identity(id(1), f.self, f.bootID)
	code := 0
	f.write(id(1), jobmeta.ResultFile, &jobmeta.Result{Schema: 1, ExitCode: &code, CompletedAt: f.now})
	for look := 1; look <= 2; look++ {
		if r := f.get(id(1)); r.State != jobmeta.Running {
			t.Fatalf("look %d with its unit active: %s, want running", look, r.State)
		}
	}
	settling = false
	if r := f.get(id(1)); r.State != jobmeta.Exited {
		t.Fatalf("with its unit gone: %s, want exited", r.State)
	}
	asked = 0
	if r := f.get(id(1)); r.State != jobmeta.Exited || asked != 0 {
		t.Fatalf("a second look: %s, the manager asked %d times", r.State, asked)
	}

	// A recorded supervisor decides, without asking the manager.
	f.st.UnitEvidence = func(string) (*reconcile.UnitEvidence, error) { return nil, errors.New("not to be asked") }
	j = f.newJob(id(2))
	j.Unit, j.FailureDomain, j.Supervisor = "commandcore-job-x-"+id(2)+".service", jobmeta.DomainSystemdUnit, &f.self
	if err := f.st.Admit(j); err != nil {
		t.Fatal(err)
	}
	f.identity(id(2), f.self, f.bootID)
	f.write(id(2), jobmeta.ResultFile, &jobmeta.Result{Schema: 1, ExitCode: &code, CompletedAt: f.now})
	if r := f.get(id(2)); r.State != jobmeta.Running {
		t.Fatalf("its recorded supervisor alive: %s, want running", r.State)
	}
	// Nor anything else to ask: live, whatever its files say.
	j = f.newJob(id(3))
	j.Unit, j.FailureDomain, j.Supervisor = "commandcore-job-x-"+id(3)+".service", jobmeta.DomainSystemdUnit, nil
	if err := f.st.Admit(j); err != nil {
		t.Fatal(err)
	}
	f.identity(id(3), procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}, f.bootID)
	f.write(id(3), jobmeta.ResultFile, &jobmeta.Result{Schema: 1, ExitCode: &code, CompletedAt: f.now})
	f.now = f.now.Add(time.Hour)
	if r := f.get(id(3)); r.State != jobmeta.Running {
		t.Fatalf("nothing to ask: %s, want running", r.State)
	}
	// Admitted in another boot: over.
	j = f.newJob(id(4))
	j.Unit, j.FailureDomain, j.Supervisor, j.BootID = "commandcore-job-x-"+id(4)+".service", jobmeta.DomainSystemdUnit, &f.self, "another-boot"
	if err := f.st.Admit(j); err != nil {
		t.Fatal(err)
	}
	f.identity(id(4), f.self, f.bootID)
	f.write(id(4), jobmeta.ResultFile, &jobmeta.Result{Schema: 1, ExitCode: &code, CompletedAt: f.now})
	if r := f.get(id(4)); r.State != jobmeta.Exited {
		t.Fatalf("admitted in another boot: %s, want exited", r.State)
	}
}

// TestForgedClaimIsNoEnd: a job that points its claim at a process that is
// gone, or deletes it, stays live while its recorded supervisor runs: no
// worker_lost, no launch_failed, nothing reconciled.
func TestForgedClaimIsNoEnd(t *testing.T) {
	f := newFixture(t)
	for n, claim := range []*procid.Identity{{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}, nil} {
		jid := id(n + 1)
		j := f.newJob(jid)
		j.Supervisor = &f.self
		if err := f.st.Admit(j); err != nil {
			t.Fatal(err)
		}
		if claim != nil {
			f.identity(jid, *claim, f.bootID)
		}
		f.st.MarkRead(jid)
	}
	f.write(id(1), jobmeta.StopFile, &jobmeta.StopRequest{Schema: 1, RequestedAt: f.now})
	f.now = f.now.Add(time.Hour)
	for jid, want := range map[string]jobmeta.State{id(1): jobmeta.Stopping, id(2): jobmeta.Starting} {
		if r := f.get(jid); r.State != want || r.Terminal {
			t.Errorf("job %s with a forged claim: %s, want %s", jid, r.State, want)
		}
		if _, err := os.Lstat(filepath.Join(f.st.Dir(jid), jobmeta.ReconciledFile)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("job %s: a conclusion was persisted: %v", jid, err)
		}
	}
	// A forged launch record in the job's directory decides nothing either.
	f.write(id(2), jobmeta.ReconciledFile, &jobmeta.Reconciled{Schema: 1, State: jobmeta.Exited, ReconciledAt: f.now, Evidence: "x"})
	if r := f.get(id(2)); r.State != jobmeta.Starting {
		t.Errorf("with a reconciled.json the job wrote: %s, want starting", r.State)
	}
}

// TestGivenUpLaunchesEnd: a launch given up on before any supervisor was
// started (no pipe, the unit refused) has ended, asked of nobody; one of
// the fallback without a supervisor on record has too, and so has one
// whose launcher died before recording it, once the launch is over.
func TestGivenUpLaunchesEnd(t *testing.T) {
	f := newFixture(t)
	f.st.UnitEvidence = func(string) (*reconcile.UnitEvidence, error) { return nil, errors.New("no bus") }
	for n, reason := range []string{jobmeta.LaunchErrPipe, jobmeta.LaunchErrUnit} {
		jid := id(n + 1)
		j := f.newJob(jid)
		j.Unit, j.FailureDomain, j.Supervisor = "commandcore-job-x-"+jid+".service", jobmeta.DomainSystemdUnit, nil
		if err := f.st.Admit(j); err != nil {
			t.Fatal(err)
		}
		if err := f.st.MarkLaunchFailed(jid, reason); err != nil {
			t.Fatal(err)
		}
		if r := f.get(jid); r.State != jobmeta.LaunchFailed {
			t.Errorf("%s: %s, want launch_failed", reason, r.State)
		}
	}
	j := f.newJob(id(3))
	j.Supervisor = nil
	if err := f.st.Admit(j); err != nil {
		t.Fatal(err)
	}
	if err := f.st.MarkLaunchFailed(id(3), jobmeta.LaunchErrInternal); err != nil {
		t.Fatal(err)
	}
	if r := f.get(id(3)); r.State != jobmeta.LaunchFailed {
		t.Errorf("a fallback launch given up on: %s, want launch_failed", r.State)
	}
	j = f.newJob(id(4))
	j.Supervisor = nil
	if err := f.st.Admit(j); err != nil {
		t.Fatal(err)
	}
	f.identity(id(4), procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}, f.bootID)
	if r := f.get(id(4)); r.State != jobmeta.Running {
		t.Errorf("a fallback launch whose supervisor is not yet on record: %s, want running", r.State)
	}
	f.now = f.now.Add(limits.ClaimTimeout * 2)
	if r := f.get(id(4)); r.State != jobmeta.WorkerLost {
		t.Errorf("once its launch is over: %s, want worker_lost", r.State)
	}
	if err := f.st.MarkLaunchFailed(id(99), jobmeta.LaunchErrInternal); !errcode.Is(err, errcode.NotFound) {
		t.Errorf("MarkLaunchFailed of a job that does not exist: %v", err)
	}
}

// TestRecordSupervisor: the supervisor the launcher records is the one
// whose life is the job's.
func TestRecordSupervisor(t *testing.T) {
	f := newFixture(t)
	sup := f.supervised(id(1))
	if err := f.st.RecordSupervisor(id(1), procid.Identity{PID: sup.Process.Pid, StartTicks: 1}); err != nil {
		t.Fatal(err)
	}
	code := 0
	f.write(id(1), jobmeta.ResultFile, &jobmeta.Result{Schema: 1, ExitCode: &code, CompletedAt: f.now})
	if r := f.get(id(1)); r.State != jobmeta.Exited {
		t.Fatalf("its recorded supervisor is another process: %s, want exited", r.State)
	}
	if err := f.st.RecordSupervisor(id(2), f.self); err == nil {
		t.Fatal("a supervisor recorded for a job that does not exist")
	}
}

// TestJobMadeSpareIsNoSpare: a job directory with a launch record is a
// job whatever it holds: without job.json and with a spare's lock file it
// is listed, counted and never swept; an earlier build's spare (its lock
// in its directory, no job.json) that no process keeps is swept.
func TestJobMadeSpareIsNoSpare(t *testing.T) {
	f := newFixture(t)
	j := f.newJob(id(1))
	j.Supervisor = &f.self
	if err := f.st.Admit(j); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(f.st.Dir(id(1)), jobmeta.JobFile))
	os.WriteFile(filepath.Join(f.st.Dir(id(1)), jobmeta.SpareLockFile), nil, 0o600)
	// An earlier build's dead spare.
	if err := os.Mkdir(f.st.Dir(spareID), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(f.st.Dir(spareID), jobmeta.SpareLockFile), nil, 0o600)
	if n, err := f.st.Spares(); err != nil || n != 0 {
		t.Fatalf("Spares = %d, %v", n, err)
	}
	if err := f.st.SweepSpares(); err != nil {
		t.Fatal(err)
	}
	if got := f.dirs(); !reflect.DeepEqual(got, []string{id(1)}) {
		t.Fatalf("after the sweep: %v", got)
	}
	f.now = f.now.Add(time.Hour)
	if r := f.get(id(1)); r.State != jobmeta.Starting {
		t.Fatalf("the job that made itself a spare: %s", r.State)
	}
	for i := range limits.MaxLiveJobs - 1 {
		f.supervised(id(100 + i))
	}
	wantCode(t, f.st.Admit(f.newJob(id(2))), errcode.JobTableFull)
}
