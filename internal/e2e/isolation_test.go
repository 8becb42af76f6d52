package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/launcher"
)

// TestJobsCannotReadTheAgentsFiles: status reports what the agent's
// start-up probe found, and it is the truth. Where the user manager can
// hide directories (this one can mount a tmpfs in a unit's namespace), a
// job reads neither the identity nor another job's output, while its own
// output is captured; where it cannot, status says agent_dirs_hidden false
// and the same job does read them, so the report is shown honest either way.
func TestJobsCannotReadTheAgentsFiles(t *testing.T) {
	e, c := onlineDevice(t)
	r, _ := statusOf(t, e.agentState)
	if !r.Agent.Running || r.Systemd.AgentDirsHidden == nil {
		t.Fatalf("status: %+v", r)
	}
	hidden := *r.Systemd.AgentDirsHidden
	first := c.start(map[string]any{"command": "echo first-job-output", "wait_ms": 10000})
	other := filepath.Join(e.agentState, "jobs", first.ProcessID, "stdout.cap")
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("test set-up: %v", err)
	}
	idFile := filepath.Join(e.agentConfig, "identity.json")
	res := c.start(map[string]any{"command": "cat " + idFile + " >/dev/null 2>&1 && echo identity-readable; " +
		"cat " + other + " >/dev/null 2>&1 && echo other-job-readable; echo own-output", "wait_ms": 10000})
	rec := c.waitTerminal(res.ProcessID, 20*time.Second)
	if rec.State != "exited" || res.FailureDomain != "systemd_unit" {
		t.Fatalf("the job did not run as a unit: %+v", rec)
	}
	out := string(c.readAll(res.ProcessID, 0).data[0])
	if hidden {
		if out != "own-output\n" {
			t.Fatalf("status says the agent's files are hidden, yet the job printed %q", out)
		}
		return
	}
	if out != "identity-readable\nother-job-readable\nown-output\n" {
		t.Fatalf("status says jobs can read the agent's files, but the job printed %q", out)
	}
	t.Log("this user manager cannot hide directories from units: shown that status says so, not the isolation itself")
}

// TestHidingProbeLeavesNothingBehind: the start-up probe's throw-away unit
// and marker files are gone afterwards, whatever it found.
func TestHidingProbeLeavesNothingBehind(t *testing.T) {
	state, config := t.TempDir(), t.TempDir()
	l := launcher.New("", false)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hidden := l.ProbeHiding(ctx, state, config)
	t.Logf("the user manager can hide directories: %v", hidden)
	for _, d := range []string{state, config} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("%s holds %v after the probe", d, ents)
		}
	}
	out, _ := exec.Command("systemctl", "--user", "list-units", "--all", "--no-legend", "commandcore-probe-*").CombinedOutput()
	if strings.TrimSpace(string(out)) != "" {
		t.Errorf("probe units left loaded: %s", out)
	}
}
