package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/systemdtest"
)

// managedRecord is a job record with the user manager its supervisor
// recorded.
type managedRecord struct {
	record
	Error    string `json:"error"`
	Identity *struct {
		Manager *struct {
			PID int `json:"pid"`
		} `json:"manager"`
	} `json:"identity"`
}

func (c *client) managed(id string) managedRecord {
	c.t.Helper()
	var r managedRecord
	c.ok("process.status", map[string]any{"process_id": id}, &r)
	return r
}

// TestUserManagerReplacedUnderARunningAgent: another `systemd --user` takes
// over the notify socket while a job is being launched, the old manager
// goes, and a new one boots on the same runtime directory and bus path, as
// when another tool restarts the user manager under a running agent. The
// job launched at the switch is answered from its supervisor's claim and
// ends with its real exit code; the agent notices the change and journals
// it once, and its next launch runs under the new manager.
func TestUserManagerReplacedUnderARunningAgent(t *testing.T) {
	systemdtest.Exclusive(t)
	old, err := systemdtest.Ensure()
	if err != nil {
		t.Fatal(err)
	}
	e, _ := onlineDevice(t)
	// The agent again, ticking fast: whether it notices the change on a
	// tick or at the next launch, it journals it once.
	e.agent.Process.Kill()
	e.agent.Wait()
	agent := exec.Command(bin, "agent", "--state-dir", e.agentState, "--config-dir", e.agentConfig, "--reconcile-every", "100ms")
	agent.Stderr = os.Stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Signal(syscall.SIGTERM); agent.Wait() })
	c, err := e.connect("/mcp/dev1", e.token, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitOnline(t, c, nil)

	// The switch begins: READY from units of the old manager goes astray.
	notify, err := old.TakeOverNotifySocket()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { notify.Release() })
	atSwitch := c.start(map[string]any{"command": "echo started; sleep 2; exit 7"})
	if atSwitch.State != "running" || atSwitch.FailureDomain != "systemd_unit" {
		t.Fatalf("the job launched at the switch: %s in %s, want running in a unit", atSwitch.State, atSwitch.FailureDomain)
	}
	if notify.Astray() == 0 {
		t.Fatal("the job's READY reached its manager; the notify socket was not taken over")
	}

	// The old manager goes.
	if err := old.KillManagerOnly(); err != nil {
		t.Fatal(err)
	}
	if err := notify.Release(); err != nil {
		t.Fatal(err)
	}

	// A new manager boots on the same paths.
	fresh, err := systemdtest.Ensure()
	if err != nil {
		t.Fatal(err)
	}
	if fresh.PID() == old.PID() {
		t.Fatalf("no new manager: still %d", fresh.PID())
	}

	var next struct {
		ProcessID     string `json:"process_id"`
		State         string `json:"state"`
		FailureDomain string `json:"failure_domain"`
		ExitCode      *int   `json:"exit_code"`
	}
	c.ok("process.start", map[string]any{"command": "echo after; exit 4", "wait_ms": 10000}, &next)
	if next.State != "exited" || next.ExitCode == nil || *next.ExitCode != 4 || next.FailureDomain != "systemd_unit" {
		t.Fatalf("the next launch: %s exit %v in %s, want exited 4 in a unit", next.State, next.ExitCode, next.FailureDomain)
	}
	if r := c.managed(next.ProcessID); r.Identity == nil || r.Identity.Manager == nil || r.Identity.Manager.PID != fresh.PID() {
		t.Fatalf("the next launch ran under manager %+v, want the new one (%d)", r.Identity, fresh.PID())
	}

	end := c.waitTerminal(atSwitch.ProcessID, 20*time.Second)
	if end.State != "exited" || end.ExitCode == nil || *end.ExitCode != 7 {
		t.Fatalf("the job launched at the switch ended %s exit %v, want exited 7", end.State, end.ExitCode)
	}
	if r := c.managed(atSwitch.ProcessID); r.Error != "" {
		t.Fatalf("the job launched at the switch carries error %q", r.Error)
	}
	if col := c.readAll(atSwitch.ProcessID, 0); string(col.data[0]) != "started\n" {
		t.Fatalf("its output: %q", col.data[0])
	}

	out, _, code := run(t, "activity", "--last", "1000", "--json", "--state-dir", e.agentState)
	if code != 0 {
		t.Fatalf("activity: exit %d", code)
	}
	var changes []string
	for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); {
		var ev struct{ Kind, Reason, Outcome string }
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Kind == "user_manager" {
			changes = append(changes, ev.Reason+"/"+ev.Outcome)
		}
		if ev.Kind == "launch_phase" && ev.Outcome != "ok" {
			t.Errorf("a launch phase failed: %s", sc.Text())
		}
	}
	// Failed when noticed on a tick before the new manager answered.
	if len(changes) != 1 || (changes[0] != "user_manager_gone/ok" && changes[0] != "user_manager_gone/failed") {
		t.Fatalf("journal entries for the change: %v, want one user_manager_gone", changes)
	}
}
