package e2e

import (
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/agent"
	"github.com/commandcore/commandcore/internal/testkit"
)

// timedRecord is the part of a record a time-limited job adds.
type timedRecord struct {
	record
	StartedAt *time.Time `json:"started_at"`
	TimeoutS  int        `json:"timeout_s"`
	StoppedBy string     `json:"stopped_by"`
}

// waitTimed polls process.status until the job is terminal or timeout.
func (c *client) waitTimed(id string, timeout time.Duration) timedRecord {
	c.t.Helper()
	c.waitTerminal(id, timeout)
	var r timedRecord
	c.ok("process.status", map[string]any{"process_id": id}, &r)
	return r
}

// ran is how long the job ran by its record: completed_at − started_at.
func ran(t *testing.T, r timedRecord) time.Duration {
	t.Helper()
	if r.StartedAt == nil || r.CompletedAt == nil {
		t.Fatalf("record lacks started_at or completed_at: %+v", r)
	}
	return r.CompletedAt.Sub(*r.StartedAt)
}

// TestTimeoutStopsTheJob: timeout_s 2 on sleep 60 ends timed_out by the
// supervisor's SIGTERM, no earlier than 2 s after the start; the unit's
// RuntimeMaxSec is only the backstop, 2 + 3 + 5 s.
func TestTimeoutStopsTheJob(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	res := c.start(map[string]any{"command": "exec sleep 60", "timeout_s": 2})
	t.Cleanup(func() { c.stopAndWait(res.ProcessID) })
	if p := unitShow(t, res.Unit, "RuntimeMaxUSec"); p["RuntimeMaxUSec"] != "10s" {
		t.Errorf("unit RuntimeMaxUSec = %q, want 10s (limit 2 s + escalation 3 s + margin 5 s)", p["RuntimeMaxUSec"])
	}
	rec := c.waitTimed(res.ProcessID, 15*time.Second)
	if rec.State != "timed_out" || rec.Signal != "SIGTERM" || rec.StoppedBy != "timeout" || rec.TimeoutS != 2 {
		t.Fatalf("job ended %s by %q (stopped_by %q, timeout_s %d), want timed_out by SIGTERM, stopped_by timeout, timeout_s 2",
			rec.State, rec.Signal, rec.StoppedBy, rec.TimeoutS)
	}
	if d := ran(t, rec); d < 2*time.Second {
		t.Fatalf("job ran %v, less than its 2 s limit", d)
	}
}

// TestTimeoutEscalatesToSIGKILL: a job ignoring SIGTERM is killed 3 s
// after its limit, exactly as process.stop escalates, and shows stopping
// meanwhile.
func TestTimeoutEscalatesToSIGKILL(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	res := c.start(map[string]any{"command": `trap '' TERM; echo ready; sleep 60`, "timeout_s": 2})
	t.Cleanup(func() { c.stopAndWait(res.ProcessID) })
	// Past the limit, during the escalation, the job shows it is being
	// stopped.
	time.Sleep(3 * time.Second)
	if st := c.status(res.ProcessID); st.State != "stopping" {
		t.Fatalf("1 s into the escalation the job is %s, want stopping", st.State)
	}
	rec := c.waitTimed(res.ProcessID, 20*time.Second)
	if rec.State != "timed_out" || rec.Signal != "SIGKILL" || rec.StoppedBy != "timeout" {
		t.Fatalf("job ended %s by %q (stopped_by %q), want timed_out by SIGKILL", rec.State, rec.Signal, rec.StoppedBy)
	}
	if d := ran(t, rec); d < 5*time.Second {
		t.Fatalf("job ran %v, less than its 2 s limit and the 3 s escalation", d)
	}
	if pid := rec.Identity.Child.PID; processExists(pid) {
		t.Fatalf("the job's shell %d still exists", pid)
	}
}

// TestTimeoutNotReachedExits: a job that ends within its limit is exited,
// with the limit on record and nobody named as stopping it.
func TestTimeoutNotReachedExits(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	res := c.start(map[string]any{"command": "echo done", "timeout_s": 30, "wait_ms": 10000})
	rec := c.waitTimed(res.ProcessID, 10*time.Second)
	if rec.State != "exited" || rec.ExitCode == nil || *rec.ExitCode != 0 || rec.StoppedBy != "" || rec.TimeoutS != 30 {
		t.Fatalf("job ended %s (exit %v, stopped_by %q, timeout_s %d), want exited 0 with timeout_s 30", rec.State, rec.ExitCode, rec.StoppedBy, rec.TimeoutS)
	}
}

// TestTimeoutBackstopReachesALateSupervisor: a supervisor that cannot act
// at the limit (SIGSTOPped here) is met by the unit's RuntimeMaxSec, which
// systemd carries out with SIGTERM and SIGCONT; the end is still timed_out.
func TestTimeoutBackstopReachesALateSupervisor(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	res := c.start(map[string]any{"command": "exec sleep 60", "timeout_s": 1})
	t.Cleanup(func() { c.stopAndWait(res.ProcessID) })
	// Once the shell is on record the limit's clock runs.
	c.childPID(res.ProcessID)
	sup := c.status(res.ProcessID).Identity.Supervisor.PID
	if err := syscall.Kill(sup, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	rec := c.waitTimed(res.ProcessID, 30*time.Second)
	if rec.State != "timed_out" {
		t.Fatalf("backstop stop ended %s (stopped_by %q), want timed_out", rec.State, rec.StoppedBy)
	}
	// RuntimeMaxSec counts from the unit's activation, a little before the
	// shell's recorded start.
	if d := ran(t, rec); d < 9*time.Second-500*time.Millisecond {
		t.Fatalf("job ran %v: ended before the 9 s backstop, yet its supervisor was stopped", d)
	}
	// It was the backstop that acted: systemd retains Result=timeout
	// until the server's tick resets the failed unit, which on a loaded
	// machine may come first (the check below wants it gone by then).
	t.Cleanup(func() { exec.Command("systemctl", "--user", "reset-failed", res.Unit).Run() })
	if p := unitShow(t, res.Unit, "LoadState", "Result"); p["LoadState"] != "not-found" && p["Result"] != "timeout" {
		t.Fatalf("unit Result %q after the backstop, want timeout", p["Result"])
	}
	// The job's end is on record, so the server's next tick resets the
	// failed unit: a `commandcore mcp` session leaves no unit loaded.
	testkit.EventuallyEvery(t, agent.ReconcileEvery+5*time.Second, 100*time.Millisecond, func() error {
		if p := unitShow(t, res.Unit, "LoadState", "ActiveState", "Result"); p["LoadState"] != "not-found" {
			return fmt.Errorf("the backstop's failed unit is still loaded after a tick: %v", p)
		}
		return nil
	})
	if again := c.waitTimed(res.ProcessID, time.Second); again.State != rec.State || again.StoppedBy != rec.StoppedBy || again.Signal != rec.Signal {
		t.Fatalf("the record changed with the unit's reset: %+v, was %+v", again, rec)
	}
}

// TestTimeoutRefusesBadValues: timeout_s outside 1-2592000 (0: none) is
// invalid_argument.
func TestTimeoutRefusesBadValues(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	for _, v := range []int{-1, 2592001} {
		if code, _ := c.fail("process.start", map[string]any{"command": "true", "timeout_s": v}); code != "invalid_argument" {
			t.Errorf("timeout_s %s: %s, want invalid_argument", strconv.Itoa(v), code)
		}
	}
}

// TestTimeoutInFallback: without a user manager there is no unit and no
// RuntimeMaxSec, and the supervisor still enforces the limit.
func TestTimeoutInFallback(t *testing.T) {
	noBus := []string{"DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent/bus", "XDG_RUNTIME_DIR=/nonexistent", "INVOCATION_ID="}
	c := newClient(t, t.TempDir(), noBus)
	res := c.start(map[string]any{"command": "exec sleep 60", "timeout_s": 1})
	if res.FailureDomain != "shared_parent_cgroup" {
		t.Fatalf("without a user bus: domain %q", res.FailureDomain)
	}
	rec := c.waitTimed(res.ProcessID, 15*time.Second)
	if rec.State != "timed_out" || rec.Signal != "SIGTERM" || rec.StoppedBy != "timeout" {
		t.Fatalf("fallback job ended %s by %q (stopped_by %q), want timed_out by SIGTERM", rec.State, rec.Signal, rec.StoppedBy)
	}
	if d := ran(t, rec); d < time.Second {
		t.Fatalf("fallback job ran %v, less than its 1 s limit", d)
	}
}
