package install_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/install"
)

// runEnv runs the binary with extra environment and returns stdout,
// stderr and the exit code.
func runEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), 0
}

// noBus is an environment whose user bus does not exist, as in a shell
// outside the user's session (the shared manager itself keeps running).
var noBus = []string{"DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent/commandcore-test-bus"}

type cliStatus struct {
	Agent struct {
		Running   bool   `json:"running"`
		Service   string `json:"service"`
		Installed bool   `json:"installed"`
		UnitFile  string `json:"unit_file"`
	} `json:"agent"`
	Systemd struct {
		UserManager   string `json:"user_manager"`
		FailureDomain string `json:"failure_domain"`
	} `json:"systemd"`
	StateDir  string `json:"state_dir"`
	ConfigDir string `json:"config_dir"`
}

// TestCLIInstallWithDirectoriesStatusUninstall is the operator's path with
// directories of their own (flags for one, XDG variables for the other):
// the unit carries them, `status --service` alone finds the running agent
// in them and reports its view of systemd even from a shell without the
// user bus, and `uninstall` without the bus removes the unit's files and
// says what it could not do; a second one says "not installed".
func TestCLIInstallWithDirectoriesStatusUninstall(t *testing.T) {
	tmp := t.TempDir()
	svc := testService()
	xdgState := filepath.Join(tmp, "xdg-state")
	o := install.Options{Service: svc, Exe: bin, UnitDir: userUnitDir(t),
		StateDir: filepath.Join(xdgState, strings.TrimSuffix(svc, ".service")), ConfigDir: filepath.Join(tmp, "config")}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		install.Uninstall(ctx, o)
	})
	// The state directory comes from $XDG_STATE_HOME, which the user
	// manager's environment does not have: the unit must carry it.
	xdg := []string{"XDG_STATE_HOME=" + xdgState}
	out, errOut, code := runEnv(t, xdg, "install", "--service", svc, "--config-dir", o.ConfigDir)
	if code != 0 {
		t.Fatalf("install: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"installed and started " + svc, "state: " + o.StateDir + "\n",
		"next: the agent is not enrolled; get a code from your server and run: COMMANDCORE_ENROLL_CODE=CODE commandcore enroll --server URL --service " + svc + " --config-dir " + o.ConfigDir + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("install output lacks %q:\n%s", want, out)
		}
	}
	pid := checkInstalled(t, bus(t), o)

	// No directory flag: the unit says where the agent's state is.
	out, _, code = runEnv(t, noBus, "status", "--json", "--service", o.Service)
	var r cliStatus
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("status --service: exit %d %v\n%s", code, err, out)
	}
	if !r.Agent.Running || r.Agent.Service != o.Service || !r.Agent.Installed || r.StateDir != o.StateDir || r.ConfigDir != o.ConfigDir {
		t.Errorf("status --service %s = %+v, want its running agent in %s and %s", o.Service, r, o.StateDir, o.ConfigDir)
	}
	// From a shell without the user bus, the facts are still the agent's.
	if r.Systemd.UserManager != "reachable" || r.Systemd.FailureDomain != "systemd_unit" {
		t.Errorf("systemd from a shell without the bus = %+v, want the agent's: reachable, systemd_unit", r.Systemd)
	}
	human, _, _ := runEnv(t, noBus, "status", "--service", o.Service)
	for _, want := range []string{"Agent:       running (pid ", "as " + o.Service, "State:       " + o.StateDir + "\n",
		"systemd:     user manager reachable; new jobs run as systemd_unit"} {
		if !strings.Contains(human, want) {
			t.Errorf("human status lacks %q:\n%s", want, human)
		}
	}

	// jobs and activity read the same agent's directories through its
	// unit, whatever the shell's own defaults are (here: nothing).
	elsewhere := append([]string{"XDG_STATE_HOME=" + t.TempDir()}, noBus...)
	if out, errOut, code := runEnv(t, elsewhere, "jobs", "list", "--json", "--service", o.Service); code != 0 {
		t.Errorf("jobs list --service %s: exit %d\n%s%s", o.Service, code, out, errOut)
	}
	if out, errOut, code := runEnv(t, elsewhere, "activity", "--last", "20", "--service", o.Service); code != 0 || !strings.Contains(out, "agent_start") {
		t.Errorf("activity --service %s: exit %d, want the agent's own journal\n%s%s", o.Service, code, out, errOut)
	}
	if _, _, code := runEnv(t, elsewhere, "jobs", "list"); code != 1 {
		t.Errorf("jobs list without --service in an empty home: exit %d, want 1 (a missing state directory)", code)
	}

	// Stopped, the unit is installed, not running.
	stopped := make(chan string, 1)
	if _, err := bus(t).StopUnitContext(context.Background(), o.Service, "replace", stopped); err != nil || <-stopped != "done" {
		t.Fatalf("stop: %v", err)
	}
	human, _, code = runEnv(t, nil, "status", "--service", o.Service)
	if code != 3 || !strings.Contains(human, "Agent:       installed, not running ("+filepath.Join(o.UnitDir, o.Service)) {
		t.Errorf("status of the stopped unit: exit %d\n%s", code, human)
	}
	if _, _, code := runEnv(t, xdg, "install", "--service", svc, "--config-dir", o.ConfigDir); code != 0 {
		t.Fatalf("reinstall: exit %d", code)
	}
	pid = checkInstalled(t, bus(t), o)

	// Without the bus: the files go, the running agent cannot be stopped.
	unitPath := filepath.Join(o.UnitDir, o.Service)
	link := filepath.Join(o.UnitDir, "default.target.wants", o.Service)
	out, errOut, code = runEnv(t, noBus, "uninstall", "--service", o.Service)
	if code != 1 || !strings.Contains(out, "removed "+unitPath+"\n") || !strings.Contains(out, "removed "+link+"\n") ||
		!strings.Contains(errOut, "could not stop or disable "+o.Service) || !strings.Contains(errOut, "not reachable") {
		t.Errorf("uninstall without the bus: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, f := range []string{unitPath, link} {
		if _, err := os.Lstat(f); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", f, err)
		}
	}
	if !processAlive(pid) {
		t.Errorf("the agent %d is gone although nothing could stop it", pid)
	}
	if out, errOut, code = runEnv(t, noBus, "uninstall", "--service", o.Service); code != 0 || out != o.Service+" is not installed\n" {
		t.Errorf("second uninstall without the bus: exit %d\nstdout: %q\nstderr: %s", code, out, errOut)
	}

	// With the bus back, uninstall stops what the manager still runs.
	if out, errOut, code = runEnv(t, nil, "uninstall", "--service", o.Service); code != 0 || !strings.Contains(out, "stopped") {
		t.Errorf("uninstall with the bus back: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if processAlive(pid) {
		t.Errorf("the agent %d still runs", pid)
	}
	if out, _, code = runEnv(t, nil, "uninstall", "--service", o.Service); code != 0 || out != o.Service+" is not installed\n" {
		t.Errorf("uninstall once more: exit %d %q", code, out)
	}
	human, _, code = runEnv(t, nil, "status", "--service", o.Service, "--state-dir", o.StateDir, "--config-dir", o.ConfigDir)
	if code != 3 || !strings.Contains(human, "Agent:       not installed (no user unit "+o.Service+")") {
		t.Errorf("status after uninstall: exit %d\n%s", code, human)
	}
}
