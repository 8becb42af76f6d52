package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/systemdtest"
)

// boundaryStatus is what `status --json` says of the boundary.
type boundaryStatus struct {
	Agent struct {
		Running bool `json:"running"`
		UID     *int `json:"uid"`
	} `json:"agent"`
	Systemd struct {
		JobsReachUserManager *bool `json:"jobs_reach_user_manager"`
		CanCutJobs           *bool `json:"can_cut_jobs"`
		CanCutRun            *bool `json:"can_cut_run"`
	} `json:"systemd"`
}

func (e *relayEnv) boundary(t *testing.T) (boundaryStatus, string) {
	t.Helper()
	out, _, _ := run(t, "status", "--json", "--state-dir", e.agentState, "--config-dir", e.agentConfig)
	var st boundaryStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || !st.Agent.Running || st.Systemd.JobsReachUserManager == nil ||
		st.Systemd.CanCutJobs == nil || st.Systemd.CanCutRun == nil || st.Agent.UID == nil || *st.Agent.UID != os.Geteuid() {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	human, _, _ := run(t, "status", "--state-dir", e.agentState, "--config-dir", e.agentConfig)
	return st, human
}

// runOutput runs command through process.run and returns its stdout.
func runOutput(t *testing.T, c *client, command string) string {
	t.Helper()
	var res struct {
		Stdout struct {
			Data string `json:"data"`
		} `json:"stdout"`
	}
	c.ok("process.run", map[string]any{"command": command}, &res)
	return res.Stdout.Data
}

// jobOutput runs command as a job to its end and returns its stdout.
func jobOutput(t *testing.T, c *client, command string) string {
	t.Helper()
	res := c.start(map[string]any{"command": command, "wait_ms": 20000})
	if res.State != "exited" || res.FailureDomain != "systemd_unit" || res.Output == nil {
		t.Fatalf("the job did not run to its end as a unit: %+v", res)
	}
	return string(c.readAll(res.ProcessID, 0).data[0])
}

// TestJobsReachTheUserManagerUnlessCutOff, through the real agent and the
// real user manager: by default a job and a process.run command start
// units of their own (`systemd-run --user`) and talk to the manager over
// its private socket (`systemctl --user`), and status says they reach it.
// Once the owner's permissions.json says "jobs_reach_user_manager": false,
// status says so, and neither reaches it any more: not over the bus, not
// over the private socket, not through a bus address of their own choosing
// (an abstract socket, or the path through a process's /proc/PID/root,
// which for a job's unit leads nowhere either), while their own output
// still arrives.
func TestJobsReachTheUserManagerUnlessCutOff(t *testing.T) {
	e, c := onlineDevice(t)
	st, human := e.boundary(t)
	if !*st.Systemd.JobsReachUserManager || !strings.Contains(human, "user manager reachable from jobs and process.run commands: they can start units of their own") {
		t.Fatalf("status without a ceiling: %+v\n%s", st, human)
	}
	const reach = `systemd-run --user --wait -q true && echo unit-started; systemctl --user show-environment >/dev/null && echo manager-answered`
	if out := jobOutput(t, c, reach); out != "unit-started\nmanager-answered\n" {
		t.Fatalf("a job by default: %q", out)
	}
	if out := runOutput(t, c, reach); out != "unit-started\nmanager-answered\n" {
		t.Fatalf("a process.run command by default: %q", out)
	}

	ceiling := filepath.Join(e.agentConfig, "permissions.json")
	if err := os.WriteFile(ceiling, []byte(`{"schema_version": 1, "tools": ["*"], "jobs_reach_user_manager": false}`), 0o600); err != nil {
		t.Fatal(err)
	}
	st, human = e.boundary(t)
	if *st.Systemd.JobsReachUserManager || !strings.Contains(human, "user manager cut off from new jobs and process.run commands (jobs_reach_user_manager false)") {
		t.Fatalf("status with the cut: %+v\n%s", st, human)
	}
	runtime := os.Getenv("XDG_RUNTIME_DIR")
	manager := systemdtest.Attach().PID()
	if runtime == "" || manager == 0 {
		t.Fatalf("test set-up: runtime directory %q, manager %d", runtime, manager)
	}
	busVia := func(addr, label string) string {
		return fmt.Sprintf(`DBUS_SESSION_BUS_ADDRESS=%s busctl --user status >/dev/null 2>&1 && echo reached-%s; `, addr, label)
	}
	direct := `systemd-run --user --wait -q true 2>/dev/null && echo unit-started; ` +
		`systemctl --user show-environment >/dev/null 2>&1 && echo manager-answered; ` +
		busVia("unix:abstract="+runtime+"/bus", "abstract")
	around := busVia(fmt.Sprintf("unix:path=/proc/%d/root%s/bus", manager, runtime), "through-the-manager") +
		busVia(fmt.Sprintf("unix:path=/proc/%d/root%s/bus", e.agent.Process.Pid, runtime), "through-the-agent")
	if *st.Systemd.CanCutJobs {
		if out := jobOutput(t, c, direct+around+"echo own-output"); out != "own-output\n" {
			t.Fatalf("a cut-off job reached the user manager: %q", out)
		}
	} else {
		if code, msg := c.fail("process.start", map[string]any{"command": reach}); code != "permission_denied" || !strings.Contains(msg, "which this host cannot do") {
			t.Fatalf("status says this host cannot cut jobs off, but a job: %s %q", code, msg)
		}
		t.Log("this user manager cannot cut units off: shown that status says so and jobs are refused, not the cut itself")
	}
	if !*st.Systemd.CanCutRun && os.Geteuid() == 0 {
		t.Fatal("status says process.run cannot be cut off, for root")
	}
	if !*st.Systemd.CanCutRun {
		if code, msg := c.fail("process.run", map[string]any{"command": reach}); code != "permission_denied" || !strings.Contains(msg, "which this host cannot do") {
			t.Fatalf("status says this host cannot cut process.run off, but a command: %s %q", code, msg)
		}
		return
	}
	// Root's commands are not in a user namespace of their own: the
	// routes around the cover stay theirs, as status says.
	if os.Geteuid() == 0 {
		if !strings.Contains(human, "as root, process.run commands and jobs without a user manager can unmount the covers below") {
			t.Fatalf("status for root does not say what root can undo:\n%s", human)
		}
		around = ""
	}
	if out := runOutput(t, c, direct+around+"echo own-output"); out != "own-output\n" {
		t.Fatalf("a cut-off process.run command reached the user manager: %q", out)
	}
	// The owner's edit takes effect at the next launch: without the key
	// jobs reach the manager again.
	if err := os.WriteFile(ceiling, []byte(`{"schema_version": 1, "tools": ["*"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := jobOutput(t, c, reach); out != "unit-started\nmanager-answered\n" {
		t.Fatalf("a job once the cut is lifted: %q", out)
	}
	if st, _ = e.boundary(t); !*st.Systemd.JobsReachUserManager {
		t.Fatal("status still says jobs are cut off")
	}
}

// TestLocalServerCutsJobsOff: `commandcore mcp` takes the owner's
// "jobs_reach_user_manager": false as the agent does: its job starts no
// unit of its own, or, on a host that cannot cut it off, is refused.
func TestLocalServerCutsJobsOff(t *testing.T) {
	cfg := t.TempDir()
	if err := os.WriteFile(filepath.Join(cfg, "permissions.json"), []byte(`{"schema_version": 1, "tools": ["*"], "jobs_reach_user_manager": false}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, t.TempDir(), nil, "--config-dir", cfg)
	args := map[string]any{"command": "systemd-run --user --wait -q true 2>/dev/null && echo unit-started; echo own-output", "wait_ms": 20000}
	raw, isErr := c.call("process.start", args)
	if isErr {
		if !strings.Contains(string(raw), "permission_denied") || !strings.Contains(string(raw), "which this host cannot do") {
			t.Fatalf("a job of the local server under the cut: %s", raw)
		}
		t.Log("this host cannot cut jobs off: shown that they are refused, not the cut itself")
		return
	}
	var res jobs.StartResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if res.State != "exited" || res.Output == nil || res.Output.Stdout.Data != "own-output\n" {
		t.Fatalf("a job of the local server under the cut: %+v", res)
	}
}
