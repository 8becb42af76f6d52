package jobstore_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/capture"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/reconcile"
)

// groupLeader starts a process that leads its own process group, as a
// fallback job's shell does, and returns its identity.
func groupLeader(t *testing.T, f *fixture) procid.Identity {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	leader, _, err := f.procs.Lookup(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return leader
}

// withChild records child as the job's shell, claimed by supervisor sup.
func (f *fixture) withChild(jid string, sup, child procid.Identity) {
	f.t.Helper()
	f.write(jid, jobmeta.ClaimFile, &jobmeta.Claim{Schema: jobmeta.SchemaVersion, Supervisor: sup,
		BootID: f.bootID, ClaimedAt: f.now, Child: &child})
}

func (f *fixture) exited(jid string) {
	f.t.Helper()
	code := 0
	f.write(jid, jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, ExitCode: &code, CompletedAt: f.now})
}

func (f *fixture) setDomain(jid string, domain, unit string) {
	f.t.Helper()
	j, err := jobmeta.Read[jobmeta.Job](filepath.Join(f.st.Dir(jid), jobmeta.JobFile))
	if err != nil {
		f.t.Fatal(err)
	}
	j.FailureDomain, j.Unit = domain, unit
	f.write(jid, jobmeta.JobFile, j)
}

// TestFallbackSurvivorsReported: a finished fallback job whose process group
// still runs reports the survivors (docs/states.md); a live job, or one a unit
// cleaned up after, reports none.
func TestFallbackSurvivorsReported(t *testing.T) {
	f := newFixture(t)
	leader := groupLeader(t, f)
	dead := procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}

	f.job(id(1), f.base) // a fallback job that exited, its group left behind
	f.withChild(id(1), dead, leader)
	f.exited(id(1))
	f.job(id(2), f.base) // a fallback job still running
	f.withChild(id(2), f.self, leader)
	f.job(id(3), f.base) // a unit job that exited
	f.setDomain(id(3), jobmeta.DomainSystemdUnit, "commandcore-job-x.service")
	f.withChild(id(3), dead, leader)
	f.exited(id(3))

	if r := f.get(id(1)); !reflect.DeepEqual(r.Survivors, []procid.Identity{leader}) {
		t.Errorf("finished fallback job: survivors %v, want the group leader %v", r.Survivors, leader)
	}
	if r := f.get(id(2)); r.State != jobmeta.Running || r.Survivors != nil {
		t.Errorf("running fallback job: %s with survivors %v, want running with none", r.State, r.Survivors)
	}
	if r := f.get(id(3)); r.State != jobmeta.Exited || r.Survivors != nil {
		t.Errorf("finished unit job: %s with survivors %v, want exited with none", r.State, r.Survivors)
	}
}

// TestCorruptJobDatedByItsDirectory: a job whose metadata cannot be read is
// dated by its directory, so it sorts among the others by age.
func TestCorruptJobDatedByItsDirectory(t *testing.T) {
	f := newFixture(t)
	f.job(id(1), f.base.Add(-3*time.Hour))
	f.job(id(3), f.base.Add(-time.Hour))
	if err := os.Mkdir(f.st.Dir(id(2)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.st.Dir(id(2)), jobmeta.JobFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	made := f.base.Add(-2 * time.Hour)
	if err := os.Chtimes(f.st.Dir(id(2)), made, made); err != nil {
		t.Fatal(err)
	}
	if r := f.get(id(2)); r.State != jobmeta.Corrupt || !r.CreatedAt.Equal(made) {
		t.Fatalf("corrupt job: %s created %v, want corrupt created %v", r.State, r.CreatedAt, made)
	}
	if got := listed(t, f); !reflect.DeepEqual(got, []string{id(3), id(2), id(1)}) {
		t.Fatalf("List order %v, want newest first with the corrupt job in its place", got)
	}
}

func listed(t *testing.T, f *fixture) []string {
	t.Helper()
	recs, err := f.st.List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ProcessID)
	}
	return ids
}

// TestListOrderTies: jobs created in the same instant list in a fixed
// order, highest process ID first.
func TestListOrderTies(t *testing.T) {
	f := newFixture(t)
	for _, n := range []int{2, 3, 1} {
		f.job(id(n), f.base)
	}
	f.job(id(4), f.base.Add(-time.Second))
	want := []string{id(3), id(2), id(1), id(4)}
	for range 3 {
		if got := listed(t, f); !reflect.DeepEqual(got, want) {
			t.Fatalf("List order %v, want %v", got, want)
		}
	}
}

// TestStrayEntriesIgnored: only directories named by a canonical process ID
// are jobs; anything else under jobs/ is neither listed nor counted.
func TestStrayEntriesIgnored(t *testing.T) {
	f := newFixture(t)
	f.running(id(1), f.base)
	if err := os.WriteFile(filepath.Join(f.root, id(2)), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"lost+found", lettered + ".tmp"} {
		if err := os.Mkdir(filepath.Join(f.root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f.now = f.base.Add(30 * 24 * time.Hour)
	if got := listed(t, f); !reflect.DeepEqual(got, []string{id(1)}) {
		t.Fatalf("List %v, want only %s", got, id(1))
	}
}

// TestJobBeingCreatedHidesNoOther: a job directory that has no job.json yet
// (being created) is skipped without hiding the jobs listed after it, in
// the records and in the summaries, so admission still counts all 32 live
// jobs (docs/limits.md).
func TestJobBeingCreatedHidesNoOther(t *testing.T) {
	f := newFixture(t)
	if err := os.Mkdir(f.st.Dir(id(0)), 0o700); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 32; i++ {
		f.running(id(i), f.base)
	}
	if got := listed(t, f); len(got) != 32 {
		t.Fatalf("List returned %d jobs, want the 32 live ones", len(got))
	}
	if sums, err := f.st.Summaries(); err != nil || len(sums) != 32 {
		t.Fatalf("Summaries returned %d jobs, want the 32 live ones: %v", len(sums), err)
	}
	wantCode(t, f.st.Admit(f.newJob(id(100))), errcode.JobTableFull)
}

// TestDirectoryWithoutJobFileAfterTwentySeconds: a directory without
// job.json counts as being created for 20 s (twice the 10 s claim timeout)
// and as a damaged job after that.
func TestDirectoryWithoutJobFileAfterTwentySeconds(t *testing.T) {
	f := newFixture(t)
	if err := os.Mkdir(f.st.Dir(id(1)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(f.st.Dir(id(1)), f.base, f.base); err != nil {
		t.Fatal(err)
	}
	f.now = f.base.Add(20 * time.Second)
	if got := listed(t, f); len(got) != 0 {
		t.Fatalf("at 20 s: listed %v, want nothing", got)
	}
	f.now = f.now.Add(time.Millisecond)
	if r, err := f.st.Get(id(1)); err != nil || r.State != jobmeta.Corrupt {
		t.Fatalf("after 20 s: %+v, %v; want corrupt", r, err)
	}
}

// TestLaunchWithoutClaimFailsAtTwentySeconds: a job without an identity
// claim is starting for 20 s after admission (twice the 10 s claim
// timeout), then launch_failed.
func TestLaunchWithoutClaimFailsAtTwentySeconds(t *testing.T) {
	f := newFixture(t)
	if err := f.st.Admit(f.newJob(id(1))); err != nil {
		t.Fatal(err)
	}
	f.now = f.base.Add(20*time.Second - time.Millisecond)
	if r := f.get(id(1)); r.State != jobmeta.Starting {
		t.Fatalf("just before 20 s: %s, want starting", r.State)
	}
	f.now = f.base.Add(20 * time.Second)
	if r := f.get(id(1)); r.State != jobmeta.LaunchFailed {
		t.Fatalf("at 20 s: %s, want launch_failed", r.State)
	}
}

// TestUnitEvidenceOnlyForLostSupervisors: systemd is asked about a job's
// unit only once its supervisor is gone, and a store without the hook
// judges unit jobs without it.
func TestUnitEvidenceOnlyForLostSupervisors(t *testing.T) {
	f := newFixture(t)
	dead := procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}
	f.running(id(1), f.base)
	f.setDomain(id(1), jobmeta.DomainSystemdUnit, "commandcore-job-1.service")
	f.job(id(2), f.base)
	f.setDomain(id(2), jobmeta.DomainSystemdUnit, "commandcore-job-2.service")
	f.identity(id(2), dead, f.bootID)

	if r := f.get(id(2)); r.State != jobmeta.WorkerLost {
		t.Fatalf("lost supervisor without a unit hook: %s, want worker_lost", r.State)
	}
	var asked []string
	f.st.UnitEvidence = func(unit string) (*reconcile.UnitEvidence, error) {
		asked = append(asked, unit)
		return nil, nil
	}
	if r := f.get(id(1)); r.State != jobmeta.Running || len(asked) != 0 {
		t.Fatalf("live supervisor: %s, units asked %v; want running, none asked", r.State, asked)
	}
}

// TestResultPublishedWhileReconciling: the supervisor publishes its terminal
// record just after the store found it gone (simulated from the unit
// evidence lookup, which runs in between). The record wins; nothing is
// concluded from the evidence.
func TestResultPublishedWhileReconciling(t *testing.T) {
	f := newFixture(t)
	dead := procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}
	f.job(id(1), f.base)
	f.setDomain(id(1), jobmeta.DomainSystemdUnit, "commandcore-job-1.service")
	f.identity(id(1), dead, f.bootID)
	f.st.UnitEvidence = func(string) (*reconcile.UnitEvidence, error) {
		code := 3
		f.write(id(1), jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, ExitCode: &code, CompletedAt: f.now})
		return &reconcile.UnitEvidence{InvocationID: "inv", Result: "exit-code"}, nil
	}
	var concluded []jobmeta.State
	f.st.OnReconciled = func(_ string, s jobmeta.State) { concluded = append(concluded, s) }
	r := f.get(id(1))
	if r.State != jobmeta.Exited || r.ExitCode == nil || *r.ExitCode != 3 || r.ReconciledAt != nil {
		t.Fatalf("record %s exit %v reconciled %v; want exited 3, not reconciled", r.State, r.ExitCode, r.ReconciledAt)
	}
	if len(concluded) != 0 {
		t.Fatalf("concluded %v from evidence despite the terminal record", concluded)
	}
	if _, err := os.Stat(filepath.Join(f.st.Dir(id(1)), jobmeta.ReconciledFile)); !os.IsNotExist(err) {
		t.Fatalf("reconciled.json written: %v", err)
	}
}

// TestManagerStopRejudged: a job the service manager stopped is judged
// against the boot and the manager as they are now (docs/states.md).
func TestManagerStopRejudged(t *testing.T) {
	src, err := procid.NewSource("/proc")
	if err != nil {
		t.Fatal(err)
	}
	realBoot := src.BootIDFunc
	f := newFixtureWith(t, src)
	dead := procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}
	stopped := func(jid string, ident *jobmeta.Claim) {
		f.job(jid, f.base)
		if ident != nil {
			f.write(jid, jobmeta.ClaimFile, ident)
		}
		f.write(jid, jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, Signal: "SIGTERM",
			StoppedByManager: true, CompletedAt: f.now})
	}
	stopped(id(1), &jobmeta.Claim{Schema: 1, Supervisor: dead, BootID: f.bootID, Manager: &f.self})
	stopped(id(2), &jobmeta.Claim{Schema: 1, Supervisor: dead, BootID: f.bootID, Manager: &dead})
	stopped(id(3), nil)

	if r := f.get(id(1)); r.State != jobmeta.Exited || r.StoppedBy != "service_manager" {
		t.Errorf("manager alive, same boot: %s stopped by %q, want exited by service_manager", r.State, r.StoppedBy)
	}
	if r := f.get(id(2)); r.State != jobmeta.UserManagerLost {
		t.Errorf("manager gone: %s, want user_manager_lost", r.State)
	}
	if r := f.get(id(3)); r.State != jobmeta.Exited {
		t.Errorf("no identity on file: %s, want exited", r.State)
	}
	src.BootIDFunc = func() (string, error) { return "11111111-2222-4333-8444-555555555555", nil }
	if r := f.get(id(1)); r.State != jobmeta.HostRebooted {
		t.Errorf("after a reboot: %s, want host_rebooted", r.State)
	}
	src.BootIDFunc = realBoot
}

// TestLiveCaptureCounters: a job without a terminal record reports the
// counters its capture files publish, and unknown for a stream whose file
// is missing.
func TestLiveCaptureCounters(t *testing.T) {
	f := newFixture(t)
	f.running(id(1), f.base)
	w, err := capture.Create(filepath.Join(f.st.Dir(id(1)), jobmeta.StdoutFile))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	r := f.get(id(1))
	if r.Capture == nil {
		t.Fatal("no capture metadata")
	}
	out, errs := r.Capture.Stdout, r.Capture.Stderr
	if out.ObservedBytes == nil || *out.ObservedBytes != 1000 || out.RetainedBytes == nil || *out.RetainedBytes != 1000 ||
		out.Complete || out.LastOutputAt == nil {
		t.Errorf("stdout capture %+v, want 1000 observed and retained, not complete", out)
	}
	if errs.ObservedBytes != nil || errs.RetainedBytes != nil || errs.Complete {
		t.Errorf("stderr capture %+v, want unknown", errs)
	}
}

// TestUnreadableBootIDConcludesNoReboot: when the current boot ID cannot be
// read (say, the agent is out of file descriptors), a transient error must
// not become a permanent host_rebooted for every job: a live job stays
// running, and a lost one is worker_lost. Nor is it taken for another
// boot: the end a live job wrote into its own directory is not believed
// while the supervisor on record runs.
func TestUnreadableBootIDConcludesNoReboot(t *testing.T) {
	src, err := procid.NewSource("/proc")
	if err != nil {
		t.Fatal(err)
	}
	src.BootIDFunc = func() (string, error) { return "", syscall.EMFILE }
	f := newFixtureWith(t, src)
	dead := procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}
	f.running(id(1), f.base)
	f.job(id(2), f.base)
	f.identity(id(2), dead, f.bootID)

	if r := f.get(id(1)); r.State != jobmeta.Running || r.ReconciledAt != nil {
		t.Errorf("live job: %s reconciled %v, want running, not reconciled", r.State, r.ReconciledAt)
	}
	r := f.get(id(2))
	rc, err := jobmeta.Read[jobmeta.Reconciled](filepath.Join(f.st.Dir(id(2)), jobmeta.ReconciledFile))
	if r.State != jobmeta.WorkerLost || err != nil || rc.Evidence != "supervisor_gone" {
		t.Errorf("lost job: %s, reconciled %+v, %v; want worker_lost by supervisor_gone", r.State, rc, err)
	}

	j := f.newJob(id(3))
	j.BootID, j.Supervisor = f.bootID, &f.self
	if err := f.st.Admit(j); err != nil {
		t.Fatal(err)
	}
	f.identity(id(3), f.self, f.bootID)
	code := 0
	f.write(id(3), jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, ExitCode: &code, CompletedAt: f.now})
	if r := f.get(id(3)); r.State != jobmeta.Running {
		t.Errorf("a live job with an end in its directory: %s, want running", r.State)
	}
}

// TestAbandonedLaunchThatRanEndsAsRecorded: a launch its launcher gave up
// on (no claim seen in time, or a start job that reported failure) whose
// supervisor claimed and ran the shell all the same is judged by the
// supervisor's records: running while it runs, then its real end, never
// launch_failed with an exit code. Given up on once its supervisor was
// started, the end such a job wrote into its own directory is not believed
// while that supervisor runs.
func TestAbandonedLaunchThatRanEndsAsRecorded(t *testing.T) {
	f := newFixture(t)
	leader := groupLeader(t, f)
	dead := procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}
	abandon := func(jid string) {
		t.Helper()
		if err := f.st.Admit(f.newJob(jid)); err != nil {
			t.Fatal(err)
		}
		if err := f.st.MarkLaunchFailed(jid, jobmeta.LaunchErrSupervisor); err != nil {
			t.Fatal(err)
		}
	}

	abandon(id(1)) // the supervisor ran the shell and is still supervising it
	f.withChild(id(1), f.self, leader)
	abandon(id(2)) // it ran the shell to its end
	f.withChild(id(2), dead, leader)
	seven := 7
	f.write(id(2), jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, ExitCode: &seven, CompletedAt: f.now})
	abandon(id(3)) // it claimed but never ran the shell
	f.identity(id(3), f.self, f.bootID)
	abandon(id(4)) // it never claimed

	if r := f.get(id(1)); r.State != jobmeta.Running || r.Terminal || r.Error != "" {
		t.Errorf("abandoned launch whose shell runs: %s terminal %v error %q, want running", r.State, r.Terminal, r.Error)
	}
	if r := f.get(id(2)); r.State != jobmeta.Exited || r.ExitCode == nil || *r.ExitCode != 7 || r.Error != "" || r.CompletedAt == nil {
		t.Errorf("abandoned launch that ran to its end: %s exit %v error %q, want exited 7", r.State, r.ExitCode, r.Error)
	}
	for _, jid := range []string{id(3), id(4)} {
		if r := f.get(jid); r.State != jobmeta.LaunchFailed || r.Error != jobmeta.LaunchErrSupervisor || r.ExitCode != nil {
			t.Errorf("abandoned launch %s that never ran: %s error %q exit %v, want launch_failed", jid, r.State, r.Error, r.ExitCode)
		}
	}

	// Its supervisor on record alive, the shell running, an end forged.
	j := f.newJob(id(5))
	j.Supervisor = &f.self
	if err := f.st.Admit(j); err != nil {
		t.Fatal(err)
	}
	if err := f.st.MarkLaunchFailed(id(5), jobmeta.LaunchErrSupervisor); err != nil {
		t.Fatal(err)
	}
	f.withChild(id(5), f.self, leader)
	f.write(id(5), jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, ExitCode: &seven, CompletedAt: f.now})
	if r := f.get(id(5)); r.State != jobmeta.Running || r.Terminal {
		t.Errorf("abandoned launch whose supervisor runs, with an end in its directory: %s, want running", r.State)
	}
}

// TestTimeLimitedJobStopsAtItsLimit: a job started with a time limit whose
// supervisor runs is running until its claim's start plus the limit, and
// stopping from that instant on (its supervisor is ending it).
func TestTimeLimitedJobStopsAtItsLimit(t *testing.T) {
	f := newFixture(t)
	j := f.newJob(id(1))
	j.Supervisor, j.TimeoutS = &f.self, 60
	if err := f.st.Admit(j); err != nil {
		t.Fatal(err)
	}
	f.identity(id(1), f.self, f.bootID) // started now
	started := f.now
	f.now = started.Add(59 * time.Second)
	if r := f.get(id(1)); r.State != jobmeta.Running {
		t.Errorf("59 s into a 60 s limit: %s, want running", r.State)
	}
	f.now = started.Add(60 * time.Second)
	if r := f.get(id(1)); r.State != jobmeta.Stopping {
		t.Errorf("at its 60 s limit: %s, want stopping", r.State)
	}
}
