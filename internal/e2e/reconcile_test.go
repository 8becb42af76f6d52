package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/systemdtest"
	"github.com/commandcore/commandcore/internal/testkit"
)

func TestKilledServerThenJobEndsOnItsOwn(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state, nil)
	res := c.start(map[string]any{"command": "echo started; sleep 2; exit 5"})
	waitOutput(t, c, res.ProcessID, "started")
	c.kill()

	c2 := newClient(t, state, nil)
	rec := c2.waitTerminal(res.ProcessID, 20*time.Second)
	if rec.State != "exited" || rec.ExitCode == nil || *rec.ExitCode != 5 || rec.CompletedAt == nil {
		t.Fatalf("after the server died the job ended %s exit %v at %v; want exited 5 with a completion time", rec.State, rec.ExitCode, rec.CompletedAt)
	}
}

func TestSupervisorKilledIsWorkerLost(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	res := c.start(map[string]any{"command": "echo partial; exec sleep 120"})
	waitOutput(t, c, res.ProcessID, "partial")
	shell := c.childPID(res.ProcessID)
	rec := c.status(res.ProcessID)
	if err := syscall.Kill(rec.Identity.Supervisor.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rec = c.waitTerminal(res.ProcessID, 20*time.Second)
	if rec.State != "worker_lost" || rec.CompletedAt != nil {
		t.Fatalf("supervisor SIGKILL: state %s completed_at %v, want worker_lost with completed_at null", rec.State, rec.CompletedAt)
	}
	var raw struct {
		ReconciledAt *time.Time `json:"reconciled_at"`
	}
	c.ok("process.status", map[string]any{"process_id": res.ProcessID}, &raw)
	if raw.ReconciledAt == nil {
		t.Fatal("a reconciled job has no reconciled_at")
	}
	if rec.Capture.Stdout.Complete || rec.Capture.Stdout.ObservedBytes == nil || *rec.Capture.Stdout.ObservedBytes < int64(len("partial\n")) {
		t.Fatalf("capture after loss: %+v (want a lower bound, complete false)", rec.Capture.Stdout)
	}
	col := c.readAll(res.ProcessID, 0)
	if string(col.data[0]) != "partial\n" {
		t.Fatalf("output captured before the loss: %q", col.data[0])
	}
	// The failed unit's evidence was read, then the unit was reset.
	if s := unitShow(t, res.Unit, "LoadState")["LoadState"]; s != "not-found" {
		t.Fatalf("the failed unit is still %s after reconciliation", s)
	}
	// The job's shell went with its unit.
	if processExists(shell) {
		t.Fatal("the job's shell survived its unit")
	}
}

func TestUserManagerKilledAloneJobRuns(t *testing.T) {
	systemdtest.Exclusive(t)
	m, err := systemdtest.Ensure()
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, t.TempDir(), nil)
	res := c.start(map[string]any{"command": "echo up; exec sleep 120"})
	waitOutput(t, c, res.ProcessID, "up")
	if err := m.KillManagerOnly(); err != nil {
		t.Fatal(err)
	}
	var rec struct {
		record
		Warnings []string `json:"warnings"`
	}
	c.ok("process.status", map[string]any{"process_id": res.ProcessID}, &rec)
	if rec.State != "running" || strings.Join(rec.Warnings, ",") != "user_manager_gone" {
		t.Fatalf("with its manager gone the job is %s with warnings %v; want running, saying so", rec.State, rec.Warnings)
	}
	c.ok("process.stop", map[string]any{"process_id": res.ProcessID}, nil)
	if r := c.waitTerminal(res.ProcessID, 10*time.Second); r.State != "stopped_by_request" {
		t.Fatalf("stop without a manager: %s", r.State)
	}
}

func TestUserManagerKilledWithItsCgroupIsUserManagerLost(t *testing.T) {
	systemdtest.Exclusive(t)
	m, err := systemdtest.Ensure()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	c := newClient(t, state, nil)
	res := c.start(map[string]any{"command": "echo up; exec sleep 120"})
	waitOutput(t, c, res.ProcessID, "up")
	if err := m.KillManagerCgroup(); err != nil {
		t.Fatal(err)
	}
	if _, err := systemdtest.Ensure(); err != nil {
		t.Fatal(err)
	}
	c2 := newClient(t, state, nil)
	rec := c2.waitTerminal(res.ProcessID, 20*time.Second)
	if rec.State != "user_manager_lost" || rec.CompletedAt != nil {
		t.Fatalf("after a cgroup kill of the manager: %s completed_at %v, want user_manager_lost", rec.State, rec.CompletedAt)
	}
	if col := c2.readAll(res.ProcessID, 0); string(col.data[0]) != "up\n" {
		t.Fatalf("output kept: %q", col.data[0])
	}
}

func TestLostFallbackSupervisorReportsSurvivors(t *testing.T) {
	state := t.TempDir()
	noBus := []string{"DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent/bus", "XDG_RUNTIME_DIR=/nonexistent"}
	c := newClient(t, state, noBus)
	res := c.start(map[string]any{"command": "echo up; exec sleep 300"})
	waitOutput(t, c, res.ProcessID, "up")
	rec := c.status(res.ProcessID)
	shell := c.childPID(res.ProcessID)
	t.Cleanup(func() { syscall.Kill(shell, syscall.SIGKILL) })
	if err := syscall.Kill(rec.Identity.Supervisor.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var lost struct {
		record
		Survivors []struct {
			PID        int    `json:"pid"`
			StartTicks uint64 `json:"start_ticks"`
		} `json:"survivors"`
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		c.ok("process.status", map[string]any{"process_id": res.ProcessID}, &lost)
		if !lost.Terminal {
			return fmt.Errorf("lost fallback supervisor: %s survivors %+v, want worker_lost with the shell %d", lost.State, lost.Survivors, shell)
		}
		return nil
	})
	if lost.State != "worker_lost" || len(lost.Survivors) != 1 || lost.Survivors[0].PID != shell {
		t.Fatalf("lost fallback supervisor: %s survivors %+v, want worker_lost with the shell %d", lost.State, lost.Survivors, shell)
	}
	// A remote stop claims nothing.
	var stopped record
	c.ok("process.stop", map[string]any{"process_id": res.ProcessID}, &stopped)
	if stopped.State != "worker_lost" || !processExists(shell) {
		t.Fatalf("a remote stop of a lost job: %s, shell alive %v", stopped.State, processExists(shell))
	}
	out, _, code := run(t, "jobs", "reconcile", res.ProcessID, "--kill", "--state-dir", state)
	if code != 0 || !strings.Contains(out, "killed") {
		t.Fatalf("jobs reconcile --kill: exit %d %q", code, out)
	}
	for i := 0; processExists(shell); i++ {
		if i > 100 {
			t.Fatal("the survivor is still alive after reconcile --kill")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUnitStoppedBySystemd: the job's unit stopped by systemd, not through
// CommandCore. With the same boot and a live manager that is an exit by
// SIGTERM, said to come from the service manager.
func TestUnitStoppedBySystemd(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	res := c.start(map[string]any{"command": "echo up; exec sleep 120"})
	waitOutput(t, c, res.ProcessID, "up")
	if out, err := exec.Command("systemctl", "--user", "stop", res.Unit).CombinedOutput(); err != nil {
		t.Fatalf("systemctl stop: %v %s", err, out)
	}
	var rec struct {
		record
		StoppedBy string `json:"stopped_by"`
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		c.ok("process.status", map[string]any{"process_id": res.ProcessID}, &rec)
		if !rec.Terminal {
			return fmt.Errorf("stopped by systemd: %s signal %q stopped_by %q", rec.State, rec.Signal, rec.StoppedBy)
		}
		return nil
	})
	if rec.State != "exited" || rec.Signal != "SIGTERM" || rec.StoppedBy != "service_manager" {
		t.Fatalf("stopped by systemd: %s signal %q stopped_by %q", rec.State, rec.Signal, rec.StoppedBy)
	}
}
