package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

type statusReport struct {
	SchemaVersion int `json:"schema_version"`
	Agent         struct {
		Running bool   `json:"running"`
		PID     int    `json:"pid"`
		Stale   bool   `json:"stale"`
		Service string `json:"service"`
	} `json:"agent"`
	Connection struct {
		State      string `json:"state"`
		AgeSeconds *int64 `json:"age_seconds"`
	} `json:"connection"`
	Jobs    struct{ Running, Terminal, Unread int } `json:"jobs"`
	Systemd struct {
		UserManager     string `json:"user_manager"`
		FailureDomain   string `json:"failure_domain"`
		AgentDirsHidden *bool  `json:"agent_dirs_hidden"`
	} `json:"systemd"`
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(state, "agent.json")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent never wrote its runtime record")
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	if out, _, code := run(t, "status", "--state-dir", state); code != 0 || len(out) == 0 {
		t.Fatalf("human status: exit %d %q", code, out)
	}

	// A clean stop leaves the record; status sees the process is gone.
	agent.Process.Signal(syscall.SIGTERM)
	if err := agent.Wait(); err != nil {
		t.Fatalf("agent exit on SIGTERM: %v", err)
	}
	if r, code := statusOf(t, state); code != 3 || r.Agent.Running || !r.Agent.Stale || r.Connection.State != "unknown" {
		t.Fatalf("after the agent stopped: exit %d %+v", code, r)
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
