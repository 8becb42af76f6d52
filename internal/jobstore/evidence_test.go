package jobstore_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/reconcile"
)

// TestInjectedOOMEvidence simulates a unit that systemd ended with
// Result=oom-kill (this host cannot enforce MemoryMax), through the
// UnitEvidence seam.
func TestInjectedOOMEvidence(t *testing.T) {
	dead := func(f *fixture) procid.Identity {
		return procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}
	}
	cases := []struct {
		name     string
		evidence *reconcile.UnitEvidence
		want     jobmeta.State
		reset    bool
	}{
		{"oom-kill of the recorded invocation", &reconcile.UnitEvidence{InvocationID: "inv-1", Result: "oom-kill"}, jobmeta.WorkloadOOM, true},
		{"signal is not oom", &reconcile.UnitEvidence{InvocationID: "inv-1", Result: "signal"}, jobmeta.WorkerLost, true},
		{"oom-kill of another invocation is not trusted", &reconcile.UnitEvidence{InvocationID: "inv-2", Result: "oom-kill"}, jobmeta.WorkerLost, true},
		{"unit settling keeps the job live", &reconcile.UnitEvidence{InvocationID: "inv-1", Settling: true}, jobmeta.Running, false},
		{"no unit loaded", nil, jobmeta.WorkerLost, false},
	}
	for n, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			var asked, reset []string
			f.st.UnitEvidence = func(unit string) (*reconcile.UnitEvidence, error) {
				asked = append(asked, unit)
				return tc.evidence, nil
			}
			f.st.ResetUnit = func(unit string) error { reset = append(reset, unit); return nil }
			jid := id(n + 1)
			f.job(jid, f.base)
			j, _ := jobmeta.Read[jobmeta.Job](filepath.Join(f.st.Dir(jid), jobmeta.JobFile))
			j.Unit = "commandcore-job-x-" + jid + ".service"
			j.FailureDomain = jobmeta.DomainSystemdUnit
			f.write(jid, jobmeta.JobFile, j)
			f.write(jid, jobmeta.ClaimFile, &jobmeta.Claim{Schema: 1, Supervisor: dead(f), BootID: f.bootID,
				InvocationID: "inv-1", ClaimedAt: f.now})
			before, _ := os.ReadFile(filepath.Join(f.st.Dir(jid), jobmeta.JobFile))

			r := f.get(jid)
			if r.State != tc.want {
				t.Fatalf("state %s, want %s", r.State, tc.want)
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
