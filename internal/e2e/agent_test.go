package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/testkit"
)

type statusReport struct {
	SchemaVersion int `json:"schema_version"`
	Agent         struct {
		Running   bool   `json:"running"`
		PID       int    `json:"pid"`
		Stale     bool   `json:"stale"`
		Service   string `json:"service"`
		Installed bool   `json:"installed"`
	} `json:"agent"`
	Connection struct {
		State      string `json:"state"`
		AgeSeconds *int64 `json:"age_seconds"`
	} `json:"connection"`
	Jobs    struct{ Running, Terminal, Unread, Spares int } `json:"jobs"`
	Systemd struct {
		UserManager     string `json:"user_manager"`
		FailureDomain   string `json:"failure_domain"`
		AgentDirsHidden *bool  `json:"agent_dirs_hidden"`
		RunDirsHidden   *bool  `json:"run_dirs_hidden"`
	} `json:"systemd"`
	StateDir string `json:"state_dir"`
}

func statusOf(t *testing.T, state string) (statusReport, int) {
	t.Helper()
	out, _, code := run(t, "status", "--json", "--state-dir", state)
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return r, code
}

// plainShell runs the binary as from a shell outside the user's session:
// no user bus address, no runtime directory, and a config home with no
// unit in it (or configHome). It returns stdout and the exit code.
func plainShell(t *testing.T, args ...string) (string, int) {
	return plainShellIn(t, t.TempDir(), args...)
}

func plainShellIn(t *testing.T, configHome string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DBUS_SESSION_BUS_ADDRESS=") && !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+configHome)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

func TestAgentAndStatus(t *testing.T) {
	state := t.TempDir()
	if r, code := statusOf(t, state); code != 3 || r.Agent.Running || r.Agent.Stale {
		t.Fatalf("before any agent: exit %d %+v", code, r.Agent)
	}
	missing := filepath.Join(state, "never-created")
	if _, code := statusOf(t, missing); code != 3 {
		t.Fatalf("status of a missing state directory: exit %d", code)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatal("status created a state directory")
	}
	agent := exec.Command(bin, "agent", "--state-dir", state, "--config-dir", t.TempDir(), "--reconcile-every", "100ms")
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	testkit.Eventually(t, 10*time.Second, func() error {
		if _, err := os.Stat(filepath.Join(state, "agent.json")); err != nil {
			return fmt.Errorf("the agent never wrote its runtime record: %v", err)
		}
		return nil
	})
	c := newClient(t, state, nil)
	c.start(map[string]any{"command": "true", "wait_ms": 5000})
	// The agent journals the end of a job it saw running.
	ended := c.start(map[string]any{"command": "sleep 1; exit 3"})
	c.waitTerminal(ended.ProcessID, 10*time.Second)
	for i := 0; ; i++ {
		out, _, _ := run(t, "activity", "--last", "100", "--json", "--state-dir", state)
		if strings.Contains(out, `"kind":"job_end","tool":"","job_id":"`+ended.ProcessID) {
			break
		}
		if i > 50 {
			t.Fatalf("no job_end entry for %s:\n%s", ended.ProcessID, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r, code := statusOf(t, state)
	if code != 0 || !r.Agent.Running || r.Agent.PID != agent.Process.Pid || r.Connection.State != "not_enrolled" || r.Connection.AgeSeconds == nil {
		t.Fatalf("with the agent running: exit %d %+v", code, r)
	}
	if r.SchemaVersion != 1 || r.Jobs.Terminal != 2 || r.Systemd.UserManager != "reachable" || r.Systemd.FailureDomain != "systemd_unit" {
		t.Fatalf("report: %+v", r)
	}
	// From a shell that cannot reach the user bus, status still reports
	// what the agent sees, and names the state directory it read; an agent
	// started from a shell is no service.
	out, code := plainShell(t, "status", "--json", "--state-dir", state)
	var plain statusReport
	if err := json.Unmarshal([]byte(out), &plain); err != nil || code != 0 {
		t.Fatalf("status --json from a plain shell: exit %d %v\n%s", code, err, out)
	}
	if plain.Systemd.UserManager != "reachable" || plain.Systemd.FailureDomain != "systemd_unit" || plain.StateDir != state || plain.Agent.Service != "" {
		t.Fatalf("status --json from a plain shell: %+v, want the agent's view (reachable, systemd_unit), %s, no service", plain, state)
	}
	out, code = plainShell(t, "status", "--state-dir", state)
	for _, want := range []string{"not a service", "State:       " + state + "\n", "systemd:     user manager reachable; new jobs run as systemd_unit (as the agent last saw it"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("human status from a plain shell: exit %d, lacks %q:\n%s", code, want, out)
		}
	}

	// A clean stop marks the record: no agent, and none installed.
	agent.Process.Signal(syscall.SIGTERM)
	if err := agent.Wait(); err != nil {
		t.Fatalf("agent exit on SIGTERM: %v", err)
	}
	if r, code := statusOf(t, state); code != 3 || r.Agent.Running || r.Agent.Stale || r.Connection.State != "unknown" || r.Systemd.UserManager != "unknown" {
		t.Fatalf("after the agent stopped: exit %d %+v", code, r)
	}
	if out, code := plainShell(t, "status", "--state-dir", state); code != 3 || !strings.Contains(out, "Agent:       not installed (no user unit commandcore.service)\n") {
		t.Fatalf("human status after the agent stopped: exit %d\n%s", code, out)
	}

	// With a unit file (here one that names the state directory), the
	// agent is installed, not running; status finds its state by the unit.
	configHome := t.TempDir()
	unitDir := filepath.Join(configHome, "systemd", "user")
	os.MkdirAll(unitDir, 0o755)
	unit := "[Service]\nType=notify\nExecStart=/usr/bin/commandcore agent --installed --state-dir " + state + "\n"
	if err := os.WriteFile(filepath.Join(unitDir, "commandcore.service"), []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = plainShellIn(t, configHome, "status")
	if code != 3 || !strings.Contains(out, "Agent:       installed, not running ("+filepath.Join(unitDir, "commandcore.service")+"; start it with: systemctl --user start commandcore.service)\n") ||
		!strings.Contains(out, "State:       "+state+"\n") {
		t.Fatalf("human status of an installed, stopped agent: exit %d\n%s", code, out)
	}

	// An agent that dies leaves a stale record.
	killed := exec.Command(bin, "agent", "--state-dir", state, "--config-dir", t.TempDir())
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if r, _ := statusOf(t, state); !r.Agent.Running || r.Agent.PID != killed.Process.Pid {
			return fmt.Errorf("the second agent (pid %d) never recorded itself: %+v", killed.Process.Pid, r.Agent)
		}
		return nil
	})
	killed.Process.Kill()
	killed.Wait()
	if r, code := statusOf(t, state); code != 3 || r.Agent.Running || !r.Agent.Stale {
		t.Fatalf("after the agent died: exit %d %+v", code, r.Agent)
	}
	if out, code := plainShell(t, "status", "--state-dir", state); code != 3 || !strings.Contains(out, fmt.Sprintf("Agent:       not running (stale record: pid %d ended without stopping)\n", killed.Process.Pid)) {
		t.Fatalf("human status after the agent died: exit %d\n%s", code, out)
	}

	// A record whose PID now belongs to another process is stale too.
	other := exec.Command("sleep", "60")
	other.Start()
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	path := filepath.Join(state, "agent.json")
	var rec map[string]any
	data, _ := os.ReadFile(path)
	json.Unmarshal(data, &rec)
	rec["pid"] = other.Process.Pid
	data, _ = json.Marshal(rec)
	os.WriteFile(path, data, 0o600)
	if r, code := statusOf(t, state); code != 3 || r.Agent.Running || !r.Agent.Stale {
		t.Fatalf("record pointing at an unrelated process: exit %d %+v", code, r.Agent)
	}
}
