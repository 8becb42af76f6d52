package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/testkit"
)

// unitShow returns `systemctl --user show` of a unit as a map.
func unitShow(t *testing.T, unit string, props ...string) map[string]string {
	t.Helper()
	args := []string{"--user", "show", unit}
	if len(props) > 0 {
		args = append(args, "-p", strings.Join(props, ","))
	}
	out, err := exec.Command("systemctl", args...).Output()
	if err != nil {
		t.Fatalf("systemctl show %s: %v", unit, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

func TestUnitProperties(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	res := c.start(map[string]any{"command": "exec sleep 60"})
	t.Cleanup(func() { c.stopAndWait(res.ProcessID) })
	p := unitShow(t, res.Unit, "NoNewPrivileges", "OOMScoreAdjust", "OOMPolicy", "KillMode", "MemoryMax", "MemorySwapMax", "ActiveState", "MainPID", "InvocationID", "Slice")
	want := map[string]string{"NoNewPrivileges": "yes", "OOMScoreAdjust": "500", "OOMPolicy": "kill", "KillMode": "control-group", "MemoryMax": "infinity", "ActiveState": "active", "Slice": "commandcore-jobs.slice"}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("%s = %q, want %q", k, p[k], v)
		}
	}
	// A healthy host is summarised to its verdict; an unhealthy one shows
	// why, and the snapshot.
	if h := res.HostHealth; h == nil || h.Verdict == "" {
		t.Errorf("process.start carries no host_health verdict: %+v", res)
	} else if h.Verdict != "ok" && (len(h.Reasons) == 0 || h.MemoryAvailableBytes == nil || h.DiskFreeBytes == nil) {
		t.Errorf("an unhealthy host_health without its reasons and snapshot: %+v", h)
	} else if h.Verdict == "ok" && (h.MemoryAvailableBytes != nil || h.PSI != nil) {
		t.Errorf("a healthy host_health is not summarised: %+v", h)
	}
	rec := c.status(res.ProcessID)
	if p["MainPID"] != itoa(int64(rec.Identity.Supervisor.PID)) {
		t.Errorf("unit MainPID %s, supervisor recorded as %d", p["MainPID"], rec.Identity.Supervisor.PID)
	}
	if p["InvocationID"] == "" || p["InvocationID"] != rec.Identity.InvocationID {
		t.Errorf("unit InvocationID %q, recorded %q", p["InvocationID"], rec.Identity.InvocationID)
	}
}

func TestPolicy(t *testing.T) {
	for _, bad := range []struct {
		name, content string
		mode          os.FileMode
	}{
		{"malformed", `{"memory_max_bytes": `, 0o600},
		{"unknown field", `{"memory_max_bytes": 268435456, "cpus": 2}`, 0o600},
		{"group writable", `{"memory_max_bytes": 268435456}`, 0o660},
		{"negative nice", `{"nice": -5}`, 0o600},
		{"nice over 19", `{"nice": 20}`, 0o600},
		{"fractional nice", `{"nice": 2.5}`, 0o600},
		{"nice as string", `{"nice": "10"}`, 0o600},
		{"cpu_weight 0", `{"cpu_weight": 0}`, 0o600},
		{"cpu_weight over 10000", `{"cpu_weight": 10001}`, 0o600},
		{"fractional cpu_weight", `{"cpu_weight": 1.5}`, 0o600},
		{"unknown priority field", `{"nice": 10, "cpu_shares": 512}`, 0o600},
	} {
		t.Run(bad.name, func(t *testing.T) {
			state := t.TempDir()
			writePolicy(t, state, bad.content, bad.mode)
			c := newClient(t, state, nil)
			if code, _ := c.fail("process.start", map[string]any{"command": "true"}); code != "policy_invalid" {
				t.Fatalf("got %s, want policy_invalid", code)
			}
			if entries, _ := os.ReadDir(filepath.Join(state, "jobs")); countDirs(entries) != 0 {
				t.Fatalf("a refused launch left %d job directories", countDirs(entries))
			}
		})
	}
	t.Run("valid", func(t *testing.T) {
		state := t.TempDir()
		writePolicy(t, state, `{"memory_max_bytes": 268435456}`, 0o600)
		c := newClient(t, state, nil)
		res := c.start(map[string]any{"command": "exec sleep 60"})
		t.Cleanup(func() { c.stopAndWait(res.ProcessID) })
		p := unitShow(t, res.Unit, "MemoryMax", "MemorySwapMax")
		if p["MemoryMax"] != "268435456" || p["MemorySwapMax"] != "0" {
			t.Fatalf("unit has MemoryMax=%s MemorySwapMax=%s", p["MemoryMax"], p["MemorySwapMax"])
		}
	})
}

// TestPolicyPriority: a new job unit carries the owner's Nice= and
// CPUWeight=, and the job and its supervisor run at that niceness; without a
// policy the unit is at nice 19, the jobs' default, with no CPUWeight=, and
// {"nice": 0} opts out of the default.
func TestPolicyPriority(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state, nil)
	plain := c.start(map[string]any{"command": "exec sleep 60"})
	t.Cleanup(func() { c.stopAndWait(plain.ProcessID) })
	if p := unitShow(t, plain.Unit, "Nice", "CPUWeight"); p["Nice"] != "19" || p["CPUWeight"] != "[not set]" {
		t.Errorf("no policy: unit has Nice=%s CPUWeight=%s", p["Nice"], p["CPUWeight"])
	}

	writePolicy(t, state, `{"nice": 10, "cpu_weight": 50}`, 0o600)
	res := c.start(map[string]any{"command": "cut -d' ' -f19 /proc/self/stat; exec sleep 60"})
	t.Cleanup(func() { c.stopAndWait(res.ProcessID) })
	if p := unitShow(t, res.Unit, "Nice", "CPUWeight"); p["Nice"] != "10" || p["CPUWeight"] != "50" {
		t.Errorf("nice 10, cpu_weight 50: unit has Nice=%s CPUWeight=%s", p["Nice"], p["CPUWeight"])
	}
	waitOutput(t, c, res.ProcessID, "10\n")
	rec := c.status(res.ProcessID)
	if n := procNice(t, rec.Identity.Supervisor.PID); n != "10" {
		t.Errorf("the supervisor runs at niceness %s, want 10", n)
	}
	term := c.start(map[string]any{"command": "exec sleep 60", "pty": map[string]int{"cols": 80, "rows": 24}})
	t.Cleanup(func() { c.stopAndWait(term.ProcessID) })

	writePolicy(t, state, `{"nice": 0}`, 0o600)
	eager := c.start(map[string]any{"command": "exec sleep 60"})
	t.Cleanup(func() { c.stopAndWait(eager.ProcessID) })
	if p := unitShow(t, eager.Unit, "Nice"); p["Nice"] != "0" {
		t.Errorf("nice 0: unit has Nice=%s", p["Nice"])
	}
	// Where the kernel shares CPU between sessions first (autogroups), each
	// job's session is as nice as the job; a terminal job is a session of
	// its own.
	if _, err := os.Stat("/proc/self/autogroup"); err != nil {
		t.Skip("this kernel has no autogroups")
	}
	waitAutogroupNice(t, childPID(t, c, res.ProcessID), "10")
	waitAutogroupNice(t, childPID(t, c, term.ProcessID), "10")
	waitAutogroupNice(t, c.status(term.ProcessID).Identity.Supervisor.PID, "10")
	waitAutogroupNice(t, childPID(t, c, plain.ProcessID), "19")
	waitAutogroupNice(t, childPID(t, c, eager.ProcessID), "0")
}

// childPID waits for a job's recorded child and returns its PID.
func childPID(t *testing.T, c *client, id string) int {
	t.Helper()
	var pid int
	testkit.Eventually(t, 10*time.Second, func() error {
		rec := c.status(id)
		if rec.Identity == nil || rec.Identity.Child == nil {
			return fmt.Errorf("job %s (%s) recorded no child", id, rec.State)
		}
		pid = rec.Identity.Child.PID
		return nil
	})
	return pid
}

// waitAutogroupNice waits until process pid's autogroup (/proc/PID/autogroup,
// "/autogroup-N nice M") has niceness want: the supervisor sets it just
// after the shell starts, retrying while the kernel's rate limit refuses.
func waitAutogroupNice(t *testing.T, pid int, want string) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, func() error {
		data, err := os.ReadFile("/proc/" + itoa(int64(pid)) + "/autogroup")
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(string(data)); f[len(f)-1] != want {
			return fmt.Errorf("pid %d: autogroup %q, want nice %s", pid, data, want)
		}
		return nil
	})
}

// procNice is field 19 of /proc/PID/stat.
func procNice(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + itoa(int64(pid)) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the parenthesised command: field 3 is the first.
	return strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))[16]
}

func writePolicy(t *testing.T, state, content string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(state, "job-resources.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func countDirs(entries []os.DirEntry) int {
	n := 0
	for _, e := range entries {
		if e.IsDir() {
			n++
		}
	}
	return n
}

func TestSecretsStayInTheEnvelope(t *testing.T) {
	state := t.TempDir()
	secretCmd := "SECRET-cmd-7f3a9c"
	secretEnv := "SECRET-env-51d2be"
	cwd := filepath.Join(t.TempDir(), "SECRET-cwd-c0ffee")
	if err := os.Mkdir(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, state, nil)
	res := c.start(map[string]any{
		"command": "X=" + secretCmd + "; exec sleep 60",
		"env":     map[string]string{"TOKEN": secretEnv},
		"cwd":     cwd,
	})
	t.Cleanup(func() { c.stopAndWait(res.ProcessID) })
	rec := c.status(res.ProcessID)
	secrets := []string{secretCmd, secretEnv, "SECRET-cwd-c0ffee"}
	check := func(what string, data []byte) {
		t.Helper()
		for _, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("%s contains %s", what, s)
			}
		}
	}
	sup := itoa(int64(rec.Identity.Supervisor.PID))
	for _, f := range []string{"cmdline", "environ"} {
		data, err := os.ReadFile("/proc/" + sup + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		check("supervisor "+f, data)
	}
	show, err := exec.Command("systemctl", "--user", "show", res.Unit).Output()
	if err != nil {
		t.Fatal(err)
	}
	check("systemctl show", show)
	if !bytes.Contains(show, []byte("ExecStart=")) {
		t.Fatal("systemctl show printed no ExecStart; the check above proves nothing")
	}
	unitFile := filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "systemd/transient", res.Unit)
	data, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatalf("transient unit file: %v", err)
	}
	check("transient unit file", data)
	jobDir := filepath.Join(state, "jobs", res.ProcessID)
	entries, err := os.ReadDir(jobDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, _ := e.Info()
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", e.Name(), fi.Mode().Perm())
		}
		data, err := os.ReadFile(filepath.Join(jobDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		check("job file "+e.Name(), data)
	}
	if fi, _ := os.Stat(jobDir); fi.Mode().Perm() != 0o700 {
		t.Errorf("job directory has mode %v, want 0700", fi.Mode().Perm())
	}
	// The job itself did get what it was given.
	res2 := c.start(map[string]any{"command": `printf %s "$TOKEN"; pwd >&2`, "env": map[string]string{"TOKEN": secretEnv}, "cwd": cwd, "wait_ms": 10000})
	if res2.Output == nil || res2.Output.Stdout.Data != secretEnv || strings.TrimSpace(res2.Output.Stderr.Data) != cwd {
		t.Fatalf("the job did not receive its environment and cwd: %+v", res2.Output)
	}
}

func TestFallbackWithoutUserManager(t *testing.T) {
	noBus := []string{"DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent/bus", "XDG_RUNTIME_DIR=/nonexistent"}
	c := newClient(t, t.TempDir(), append(noBus, "INVOCATION_ID="))
	res := c.start(map[string]any{"command": "echo fallback", "wait_ms": 10000})
	if res.FailureDomain != "shared_parent_cgroup" || res.Unit != "" {
		t.Fatalf("without a user bus: domain %q unit %q", res.FailureDomain, res.Unit)
	}
	if res.State != "exited" || res.Output == nil || res.Output.Stdout.Data != "fallback\n" {
		t.Fatalf("fallback job: %s %+v", res.State, res.Output)
	}
	// A fallback job can be stopped too.
	long := c.start(map[string]any{"command": "echo ready; exec sleep 60"})
	waitOutput(t, c, long.ProcessID, "ready")
	c.ok("process.stop", map[string]any{"process_id": long.ProcessID}, nil)
	if rec := c.waitTerminal(long.ProcessID, 10*time.Second); rec.State != "stopped_by_request" {
		t.Fatalf("fallback stop ended %s", rec.State)
	}

	// Fallback jobs get the default niceness, the owner's nice reaches them
	// too, and an agent that is nicer already leaves its jobs at its own
	// niceness, never above it.
	dflt := c.start(map[string]any{"command": "cut -d' ' -f19 /proc/self/stat", "wait_ms": 10000})
	if dflt.Output == nil || dflt.Output.Stdout.Data != "19\n" {
		t.Fatalf("fallback job without a policy: output %+v, want niceness 19", dflt.Output)
	}
	state := t.TempDir()
	writePolicy(t, state, `{"nice": 10, "cpu_weight": 50}`, 0o600)
	cn := newClient(t, state, append(noBus, "INVOCATION_ID="))
	niced := cn.start(map[string]any{"command": "cut -d' ' -f19 /proc/self/stat", "wait_ms": 10000})
	if niced.FailureDomain != "shared_parent_cgroup" || niced.Output == nil || niced.Output.Stdout.Data != "10\n" {
		t.Fatalf("fallback job under nice 10: domain %q, output %+v", niced.FailureDomain, niced.Output)
	}
	if n := procNice(t, cn.cmd.Process.Pid); n != "0" {
		t.Errorf("the agent runs at niceness %s after launching a niced job", n)
	}
	if _, err := os.Stat("/proc/self/autogroup"); err == nil {
		long := cn.start(map[string]any{"command": "exec sleep 60"})
		waitAutogroupNice(t, childPID(t, cn, long.ProcessID), "10")
		cn.ok("process.stop", map[string]any{"process_id": long.ProcessID}, nil)
		cn.waitTerminal(long.ProcessID, 10*time.Second)
	}
	writePolicy(t, state, `{"nice": 3}`, 0o600)
	cmd := exec.Command("nice", "-n", "5", bin, "mcp", "--state-dir", state, "--config-dir", t.TempDir())
	cmd.Env = append(append(os.Environ(), noBus...), "INVOCATION_ID=")
	cmd.Stderr = os.Stderr
	k, err := testkit.Dial(t, "e2e", testkit.Stdio(cmd), nil)
	if err != nil {
		t.Fatalf("connect to commandcore mcp under nice: %v", err)
	}
	var under jobs.StartResult
	k.OK("process.start", map[string]any{"command": "cut -d' ' -f19 /proc/self/stat", "wait_ms": 10000}, &under)
	if under.Output == nil || under.Output.Stdout.Data != "5\n" {
		t.Fatalf("an agent at niceness 5 with nice 3 in the policy: job output %+v", under.Output)
	}

	for name, env := range map[string][]string{
		"--installed":   nil,
		"INVOCATION_ID": {"INVOCATION_ID=0123456789abcdef0123456789abcdef"},
	} {
		state := t.TempDir()
		var args []string
		if name == "--installed" {
			args = []string{"--installed"}
		}
		ci := newClient(t, state, append(append([]string{}, noBus...), env...), args...)
		if code, _ := ci.fail("process.start", map[string]any{"command": "true"}); code != "systemd_unavailable" {
			t.Errorf("installed (%s) without a user bus: got %s, want systemd_unavailable", name, code)
		}
	}
}
