package install_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/install"
	"github.com/commandcore/commandcore/internal/testkit"
)

// testService returns a unit name of its own for each test, so a leftover
// from a failed run never meets the next one.
func testService() string {
	return fmt.Sprintf("commandcore-test-%d-%d.service", os.Getpid(), units.Add(1))
}

var units atomic.Int64

// userUnitDir is the user manager's own config directory. Units must live
// where the manager looks for them, so unlike the state, they cannot go to
// a temporary directory; each test uses a unit name of its own and removes
// it again.
func userUnitDir(t *testing.T) string {
	t.Helper()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(home, ".config", "systemd", "user")
}

// options returns install options for a fresh test unit with temporary
// state and config directories, and uninstalls the unit when the test ends.
func options(t *testing.T) install.Options {
	t.Helper()
	tmp := t.TempDir()
	o := install.Options{
		Service:   testService(),
		Exe:       bin,
		UnitDir:   userUnitDir(t),
		StateDir:  filepath.Join(tmp, "state"),
		ConfigDir: filepath.Join(tmp, "config"),
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := install.Uninstall(ctx, o); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return o
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// bus is a connection to the user manager for the test's own questions.
func bus(t *testing.T) *sdbus.Conn {
	t.Helper()
	c, err := sdbus.NewUserConnectionContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// props returns the unit's Unit and Service properties.
func props(t *testing.T, c *sdbus.Conn, name string) map[string]any {
	t.Helper()
	u, err := c.GetUnitPropertiesContext(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.GetUnitTypePropertiesContext(context.Background(), name, "Service")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range s {
		u[k] = v
	}
	return u
}

func want(t *testing.T, p map[string]any, key string, val any) {
	t.Helper()
	if got := p[key]; !reflect.DeepEqual(got, val) {
		t.Errorf("%s = %#v, want %#v", key, got, val)
	}
}

// run runs the binary and returns stdout and the exit code.
func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if errb.Len() > 0 {
		t.Logf("%v: stderr: %s", args, errb.String())
	}
	return out.String(), code
}

type statusReport struct {
	Agent struct {
		Running bool   `json:"running"`
		PID     int    `json:"pid"`
		Service string `json:"service"`
	} `json:"agent"`
}

// status runs `commandcore status --json` for the installation o.
func status(t *testing.T, o install.Options) (statusReport, int) {
	t.Helper()
	out, code := run(t, "status", "--json", "--service", o.Service, "--state-dir", o.StateDir, "--config-dir", o.ConfigDir)
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("status --json (exit %d): %v\n%s", code, err, out)
	}
	return r, code
}

// cmdline returns a process's arguments.
func cmdline(t *testing.T, pid uint32) []string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
}

// fileState is what must not change about a file that nobody rewrites.
type fileState struct {
	data  string
	ino   uint64
	mtime time.Time
}

// snapshot records device.json and every job metadata file (*.json) under
// state. The agent rewrites its runtime record and journal; those are not
// in it.
func snapshot(t *testing.T, state string) map[string]fileState {
	t.Helper()
	snap := map[string]fileState{}
	record(t, snap, state, filepath.Join(state, "device.json"))
	walk(t, snap, state, filepath.Join(state, "jobs"), func(name string) bool { return strings.HasSuffix(name, ".json") })
	return snap
}

// jobFiles records every file of one job (capture files too).
func jobFiles(t *testing.T, state, id string) map[string]fileState {
	t.Helper()
	snap := map[string]fileState{}
	walk(t, snap, state, filepath.Join(state, "jobs", id), func(string) bool { return true })
	return snap
}

func walk(t *testing.T, snap map[string]fileState, state, dir string, keep func(string) bool) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && !strings.HasPrefix(d.Name(), ".") && keep(d.Name()) {
			record(t, snap, state, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func record(t *testing.T, snap map[string]fileState, state, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(state, path)
	snap[rel] = fileState{string(data), fi.Sys().(*syscall.Stat_t).Ino, fi.ModTime()}
}

func sameFiles(t *testing.T, what string, before, after map[string]fileState) {
	t.Helper()
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			t.Errorf("%s: %s is gone", what, name)
		case a.data != b.data:
			t.Errorf("%s: %s changed:\n%s\n-->\n%s", what, name, b.data, a.data)
		case a.ino != b.ino || !a.mtime.Equal(b.mtime):
			t.Errorf("%s: %s was rewritten (same bytes, new inode or mtime)", what, name)
		}
	}
}

// startJobs starts two jobs through `commandcore mcp` on the installation's
// state: one that has finished and one that keeps running.
func startJobs(t *testing.T, o install.Options) (done, running string) {
	t.Helper()
	cmd := exec.Command(bin, "mcp", "--service", o.Service, "--state-dir", o.StateDir, "--config-dir", o.ConfigDir)
	cmd.Stderr = os.Stderr
	ctx := ctxFor(t)
	s, err := mcp.NewClient(&mcp.Implementation{Name: "install-test", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to commandcore mcp: %v", err)
	}
	defer s.Close()
	start := func(command string, waitMS int) string {
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "process.start",
			Arguments: map[string]any{"command": command, "wait_ms": waitMS}})
		if err != nil || res.IsError {
			t.Fatalf("process.start %q: %v %+v", command, err, res)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var r struct {
			ProcessID string `json:"process_id"`
		}
		if err := json.Unmarshal(raw, &r); err != nil || r.ProcessID == "" {
			t.Fatalf("process.start %q: %s", command, raw)
		}
		return r.ProcessID
	}
	done = start("echo installed", 5000)
	waitJob(t, o, done, func(state string, terminal bool) bool { return terminal })
	running = start("sleep 600", 0)
	// The supervisor records the shell's identity a moment after its own
	// claim; the metadata is complete (and must then stay as it is) once
	// both are on disk.
	waitJob(t, o, running, func(state string, _ bool) bool { return state == "running" && jobHasChild(t, o, running) })
	t.Cleanup(func() {
		run(t, "jobs", "stop", running, "--service", o.Service, "--state-dir", o.StateDir, "--config-dir", o.ConfigDir)
		waitJob(t, o, running, func(_ string, terminal bool) bool { return terminal })
	})
	return done, running
}

// jobState returns a job's state from `commandcore jobs show --json`.
func jobState(t *testing.T, o install.Options, id string) (string, bool) {
	t.Helper()
	out, code := run(t, "jobs", "show", id, "--json", "--service", o.Service, "--state-dir", o.StateDir, "--config-dir", o.ConfigDir)
	var r struct {
		State    string `json:"state"`
		Terminal bool   `json:"terminal"`
	}
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
		t.Fatalf("jobs show %s: exit %d %v\n%s", id, code, err, out)
	}
	return r.State, r.Terminal
}

// jobHasChild reports whether the job's record names its shell's identity.
func jobHasChild(t *testing.T, o install.Options, id string) bool {
	t.Helper()
	out, _ := run(t, "jobs", "show", id, "--json", "--service", o.Service, "--state-dir", o.StateDir, "--config-dir", o.ConfigDir)
	var r struct {
		Identity *struct {
			Child *struct{ PID int } `json:"child"`
		} `json:"identity"`
	}
	return json.Unmarshal([]byte(out), &r) == nil && r.Identity != nil && r.Identity.Child != nil && r.Identity.Child.PID > 0
}

func waitJob(t *testing.T, o install.Options, id string, ok func(string, bool) bool) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, func() error {
		if state, terminal := jobState(t, o, id); !ok(state, terminal) {
			return fmt.Errorf("job %s stuck in %s", id, state)
		}
		return nil
	})
}

// checkInstalled checks that o's unit is enabled, active after READY and
// runs the agent as asked, and returns its main PID.
func checkInstalled(t *testing.T, c *sdbus.Conn, o install.Options) uint32 {
	t.Helper()
	p := props(t, c, o.Service)
	want(t, p, "LoadState", "loaded")
	want(t, p, "UnitFileState", "enabled")
	want(t, p, "ActiveState", "active")
	want(t, p, "SubState", "running")
	want(t, p, "FragmentPath", filepath.Join(o.UnitDir, o.Service))
	want(t, p, "Type", "notify")
	want(t, p, "NotifyAccess", "main")
	want(t, p, "Restart", "on-failure")
	want(t, p, "RestartUSec", uint64(5*time.Second/time.Microsecond))
	want(t, p, "WatchdogUSec", uint64(30*time.Second/time.Microsecond))
	want(t, p, "StartLimitBurst", uint32(5))
	want(t, p, "StartLimitIntervalUSec", uint64(120*time.Second/time.Microsecond))
	want(t, p, "NRestarts", uint32(0))
	pid, _ := p["MainPID"].(uint32)
	if pid == 0 {
		t.Fatalf("no main PID: %+v", p)
	}
	wantArgs := []string{bin, "agent", "--installed", "--service", o.Service,
		"--state-dir", o.StateDir, "--config-dir", o.ConfigDir}
	if got := cmdline(t, pid); !reflect.DeepEqual(got, wantArgs) {
		t.Errorf("agent command line %q, want %q", got, wantArgs)
	}
	// Type=notify: the start job was done only after READY=1, and READY
	// comes only once the state and the journal are open.
	for _, f := range []string{"device.json", "activity.db"} {
		if _, err := os.Stat(filepath.Join(o.StateDir, f)); err != nil {
			t.Errorf("agent reported READY without %s: %v", f, err)
		}
	}
	r, code := status(t, o)
	if code != 0 || !r.Agent.Running || r.Agent.PID != int(pid) || r.Agent.Service != o.Service {
		t.Errorf("status: exit %d %+v, want the agent %d of %s running", code, r.Agent, pid, o.Service)
	}
	return pid
}

func TestInstallReinstallUninstall(t *testing.T) {
	o := options(t)
	c := bus(t)
	unitPath := filepath.Join(o.UnitDir, o.Service)

	if err := install.Install(ctxFor(t), o); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("unit file mode %v, want 0644", fi.Mode().Perm())
	}
	if _, err := os.Lstat(filepath.Join(o.UnitDir, "default.target.wants", o.Service)); err != nil {
		t.Errorf("not wanted by default.target: %v", err)
	}
	pid1 := checkInstalled(t, c, o)

	// Jobs the installation already has: their metadata and the identity
	// must come through a reinstall untouched.
	done, running := startJobs(t, o)
	before := snapshot(t, o.StateDir)
	beforeDone := jobFiles(t, o.StateDir, done)

	if err := install.Install(ctxFor(t), o); err != nil {
		t.Fatalf("reinstall: %v", err)
	}
	pid2 := checkInstalled(t, c, o)
	if pid2 == pid1 {
		t.Errorf("reinstall did not restart the agent (pid %d)", pid1)
	}
	if processAlive(pid1) {
		t.Errorf("the old agent %d still runs", pid1)
	}
	sameFiles(t, "after reinstall", before, snapshot(t, o.StateDir))
	sameFiles(t, "finished job after reinstall", beforeDone, jobFiles(t, o.StateDir, done))
	if state, _ := jobState(t, o, running); state != "running" {
		t.Errorf("the running job is %s after the reinstall", state)
	}

	// The agent ends cleanly on SIGTERM (exit 0, not a signal death).
	stopped := make(chan string, 1)
	if _, err := c.StopUnitContext(context.Background(), o.Service, "replace", stopped); err != nil {
		t.Fatal(err)
	}
	if res := <-stopped; res != "done" {
		t.Fatalf("stop: %s", res)
	}
	p := props(t, c, o.Service)
	want(t, p, "Result", "success")
	want(t, p, "ExecMainCode", int32(1)) // CLD_EXITED
	want(t, p, "ExecMainStatus", int32(0))

	// Starting it again (a reinstall over a stopped unit) works too.
	if err := install.Install(ctxFor(t), o); err != nil {
		t.Fatalf("install over a stopped unit: %v", err)
	}
	pid3 := checkInstalled(t, c, o)

	if res, err := install.Uninstall(ctxFor(t), o); err != nil || !res.Found || !res.Stopped || len(res.Removed) != 1 || res.Removed[0] != unitPath {
		t.Fatalf("uninstall: %+v %v, want the running unit stopped (and disabled) and its file removed", res, err)
	}
	if _, err := os.Stat(unitPath); !os.IsNotExist(err) {
		t.Errorf("unit file still there: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(o.UnitDir, "default.target.wants", o.Service)); !os.IsNotExist(err) {
		t.Errorf("still wanted by default.target: %v", err)
	}
	p = props(t, c, o.Service)
	want(t, p, "LoadState", "not-found")
	want(t, p, "ActiveState", "inactive")
	if processAlive(pid3) {
		t.Errorf("the agent %d still runs after uninstall", pid3)
	}
	if r, code := status(t, o); code != 3 || r.Agent.Running {
		t.Errorf("status after uninstall: exit %d %+v, want 3 and not running", code, r.Agent)
	}
	// The state stays: identity, jobs, journal.
	sameFiles(t, "after uninstall", before, snapshot(t, o.StateDir))
	if _, err := os.Stat(filepath.Join(o.StateDir, "activity.db")); err != nil {
		t.Errorf("journal gone after uninstall: %v", err)
	}
	if state, _ := jobState(t, o, running); state != "running" {
		t.Errorf("the running job is %s after uninstall", state)
	}

	// Uninstalling again is a no-op.
	if res, err := install.Uninstall(ctxFor(t), o); err != nil || res.Found {
		t.Errorf("second uninstall: %+v %v, want nothing found", res, err)
	}
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid uint32) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestWatchdogIsFed shortens the watchdog with a drop-in, as an owner could,
// and checks that the agent's main loop keeps feeding it.
func TestWatchdogIsFed(t *testing.T) {
	o := options(t)
	c := bus(t)
	dropIn := filepath.Join(o.UnitDir, o.Service+".d")
	if err := os.MkdirAll(dropIn, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dropIn) })
	if err := os.WriteFile(filepath.Join(dropIn, "watchdog.conf"), []byte("[Service]\nWatchdogSec=1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := install.Install(ctxFor(t), o); err != nil {
		t.Fatal(err)
	}
	p := props(t, c, o.Service)
	want(t, p, "WatchdogUSec", uint64(time.Second/time.Microsecond))
	pid := p["MainPID"]
	time.Sleep(4 * time.Second)
	p = props(t, c, o.Service)
	want(t, p, "ActiveState", "active")
	want(t, p, "MainPID", pid)
	want(t, p, "NRestarts", uint32(0))
	want(t, p, "Result", "success")
}

// TestInstallReportsAFailedStart installs a unit whose program exits before
// READY: Install says so instead of claiming success.
func TestInstallReportsAFailedStart(t *testing.T) {
	o := options(t)
	o.Exe = filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(o.Exe, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := install.Install(ctxFor(t), o)
	if err == nil {
		t.Fatal("Install succeeded for a program that exits at once")
	}
	t.Log(err)
	if msg := err.Error(); !strings.Contains(msg, o.Service) || !strings.Contains(msg, "exit status 3") {
		t.Errorf("error %q does not say which unit failed and how", msg)
	}
	// Installing a working binary over it (the unit now waits to restart)
	// starts the agent.
	o.Exe = bin
	if err := install.Install(ctxFor(t), o); err != nil {
		t.Fatalf("install over a failing unit: %v", err)
	}
	checkInstalled(t, bus(t), o)
}

// TestInstallRefusesAnUnsearchedUnitDir: a unit the manager would never
// load is refused before anything is written.
func TestInstallRefusesAnUnsearchedUnitDir(t *testing.T) {
	o := options(t)
	o.UnitDir = t.TempDir()
	err := install.Install(ctxFor(t), o)
	if err == nil || !strings.Contains(err.Error(), "does not load units from") {
		t.Fatalf("Install into %s: %v", o.UnitDir, err)
	}
	if entries, _ := os.ReadDir(o.UnitDir); len(entries) != 0 {
		t.Errorf("wrote %v into a directory the manager ignores", entries)
	}
	if _, err := os.Stat(o.StateDir); !os.IsNotExist(err) {
		t.Errorf("state directory touched: %v", err)
	}
}

func TestInstallRefusesAMissingExecutable(t *testing.T) {
	o := options(t)
	o.Exe = filepath.Join(t.TempDir(), "nothing")
	if err := install.Install(ctxFor(t), o); err == nil {
		t.Fatal("Install succeeded without an executable")
	}
	if _, err := os.Stat(filepath.Join(o.UnitDir, o.Service)); !os.IsNotExist(err) {
		t.Errorf("unit file written: %v", err)
	}
}
