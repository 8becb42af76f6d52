package jobstore_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/reconcile"
)

// TestInjectedOOMEvidence simulates a unit that systemd ended with
// Result=oom-kill (this host cannot enforce MemoryMax), or with
// Result=timeout by a time-limited job's RuntimeMaxSec backstop while its
// supervisor could not act, through the UnitEvidence seam.
func TestInjectedOOMEvidence(t *testing.T) {
	dead := func(f *fixture) procid.Identity {
		return procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}
	}
	cases := []struct {
		name     string
		evidence *reconcile.UnitEvidence
		want     jobmeta.State
		reset    bool
		timeoutS int
	}{
		{"oom-kill of the recorded invocation", &reconcile.UnitEvidence{InvocationID: "inv-1", Result: "oom-kill"}, jobmeta.WorkloadOOM, true, 0},
		{"signal is not oom", &reconcile.UnitEvidence{InvocationID: "inv-1", Result: "signal"}, jobmeta.WorkerLost, true, 0},
		{"oom-kill of another invocation is not trusted", &reconcile.UnitEvidence{InvocationID: "inv-2", Result: "oom-kill"}, jobmeta.WorkerLost, true, 0},
		{"unit settling keeps the job live", &reconcile.UnitEvidence{InvocationID: "inv-1", Settling: true}, jobmeta.Running, false, 0},
		{"no unit loaded", nil, jobmeta.WorkerLost, false, 0},
		{"backstop timeout of a time-limited job", &reconcile.UnitEvidence{InvocationID: "inv-1", Result: "timeout"}, jobmeta.TimedOut, true, 2},
		{"timeout of a job without a limit", &reconcile.UnitEvidence{InvocationID: "inv-1", Result: "timeout"}, jobmeta.WorkerLost, true, 0},
	}
	for n, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			var asked, reset []string
			f.st.UnitEvidence = func(unit string) (*reconcile.UnitEvidence, error) {
				asked = append(asked, unit)
				return tc.evidence, nil
			}
			f.st.ResetUnit = func(_, unit string) error { reset = append(reset, unit); return nil }
			jid := id(n + 1)
			f.job(jid, f.base)
			j, _ := jobmeta.Read[jobmeta.Job](filepath.Join(f.st.Dir(jid), jobmeta.JobFile))
			j.Unit = "commandcore-job-x-" + jid + ".service"
			j.FailureDomain = jobmeta.DomainSystemdUnit
			j.TimeoutS = tc.timeoutS
			f.write(jid, jobmeta.JobFile, j)
			f.write(jid, jobmeta.ClaimFile, &jobmeta.Claim{Schema: 1, Supervisor: dead(f), BootID: f.bootID,
				InvocationID: "inv-1", ClaimedAt: f.now})
			before, _ := os.ReadFile(filepath.Join(f.st.Dir(jid), jobmeta.JobFile))

			r := f.get(jid)
			if r.State != tc.want || r.TimeoutS != tc.timeoutS {
				t.Fatalf("state %s with timeout_s %d, want %s with %d", r.State, r.TimeoutS, tc.want, tc.timeoutS)
			}
			if len(asked) != 1 || asked[0] != j.Unit {
				t.Fatalf("evidence asked for %v", asked)
			}
			if tc.reset != (len(reset) == 1) {
				t.Fatalf("reset %v, want reset %v", reset, tc.reset)
			}
			if tc.want.Terminal() && (r.ReconciledAt == nil || r.CompletedAt != nil) {
				t.Fatalf("reconciled_at %v completed_at %v", r.ReconciledAt, r.CompletedAt)
			}
			// job.json is never rewritten by reconciliation.
			after, _ := os.ReadFile(filepath.Join(f.st.Dir(jid), jobmeta.JobFile))
			if !bytes.Equal(before, after) {
				t.Fatal("reconciliation rewrote job.json")
			}
			f.now = f.now.Add(time.Minute)
			if r2 := f.get(jid); r2.State != tc.want {
				t.Fatalf("second look: %s", r2.State)
			}
		})
	}
}

// TestReleaseUnitOnlyOnceNothingIsLeftToRead: a job's failed unit is reset
// when the job's end is on disk (the supervisor's record, a reconciled
// record, an abandoned launch) or the job is gone; never while the job is
// live or its metadata is damaged. A lost supervisor's unit is read first:
// its evidence is persisted, then the unit is reset, once.
func TestReleaseUnitOnlyOnceNothingIsLeftToRead(t *testing.T) {
	f := newFixture(t)
	var reset []string
	f.st.ResetUnit = func(jid, unit string) error { reset = append(reset, jid); return nil }
	f.st.UnitEvidence = func(string) (*reconcile.UnitEvidence, error) {
		return &reconcile.UnitEvidence{InvocationID: "inv-1", Result: "oom-kill"}, nil
	}
	ended, reconciled, abandoned, live, lost, damaged, creating, gone := id(1), id(2), id(3), id(4), id(5), id(6), id(7), id(8)
	f.terminal(ended, f.base, f.now, false)
	f.job(reconciled, f.base)
	f.write(reconciled, jobmeta.ReconciledFile, &jobmeta.Reconciled{Schema: jobmeta.SchemaVersion, State: jobmeta.WorkerLost, ReconciledAt: f.now})
	f.job(abandoned, f.base)
	if err := f.st.MarkLaunchFailed(abandoned, jobmeta.LaunchErrClaimTimeout); err != nil {
		t.Fatal(err)
	}
	f.running(live, f.now)
	f.job(lost, f.base)
	f.setDomain(lost, jobmeta.DomainSystemdUnit, "commandcore-job-x-"+lost+".service")
	f.write(lost, jobmeta.ClaimFile, &jobmeta.Claim{Schema: 1, Supervisor: procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1},
		BootID: f.bootID, InvocationID: "inv-1", ClaimedAt: f.now})
	f.job(damaged, f.base)
	if err := os.WriteFile(filepath.Join(f.st.Dir(damaged), jobmeta.ResultFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.st.Dir(creating), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, jid := range []string{ended, reconciled, abandoned, live, lost, damaged, creating, gone} {
		f.st.ReleaseUnit(jid, "unit-of-"+jid)
	}
	if want := []string{ended, reconciled, abandoned, lost, gone}; fmt.Sprint(reset) != fmt.Sprint(want) {
		t.Fatalf("reset the units of %v, want %v", reset, want)
	}
	if r := f.get(lost); r.State != jobmeta.WorkloadOOM || r.ReconciledAt == nil {
		t.Fatalf("the lost supervisor's job: %s reconciled %v, want workload_oom on record", r.State, r.ReconciledAt)
	}
}
