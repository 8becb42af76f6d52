package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/launcher"
	"github.com/commandcore/commandcore/internal/testkit"
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

// TestRunCannotReadTheAgentsFiles: a token allowed only process.run runs
// a command that reads neither the identity nor the jobs' output: it
// fails, saying there is no such file, while its live output streams and
// what it writes outside the agent's directories is written. Status says
// so (run_dirs_hidden); root, which these tests run as, can always make a
// mount namespace. On a host that refuses it, status says false and the
// same command does read them.
func TestRunCannotReadTheAgentsFiles(t *testing.T) {
	e, c := onlineDevice(t)
	r, _ := statusOf(t, e.agentState)
	if !r.Agent.Running || r.Systemd.RunDirsHidden == nil {
		t.Fatalf("status: %+v", r)
	}
	hidden := *r.Systemd.RunDirsHidden
	if !hidden && os.Geteuid() == 0 {
		t.Fatal("status says process.run cannot be hidden, for root")
	}
	job := c.start(map[string]any{"command": "echo first-job-output", "wait_ms": 10000})
	c.waitTerminal(job.ProcessID, 20*time.Second)
	runOnly, _ := e.newToken("dev1", "process.run")
	var mu sync.Mutex
	var live strings.Builder
	rc, err := e.connect("/mcp/dev1", runOnly, func(p *mcp.ProgressNotificationParams) {
		mu.Lock()
		live.WriteString(p.Message)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	idFile := filepath.Join(e.agentConfig, "identity.json")
	params := &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{"cwd": work,
		"command": "echo streamed; echo written > out; cat " + idFile + "; ls " + filepath.Join(e.agentState, "jobs")}}
	params.SetProgressToken("tok-hide")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := rc.session.CallTool(ctx, params)
	if err != nil || out.IsError {
		t.Fatalf("process.run: %v %+v", err, out)
	}
	var res struct {
		ExitCode       *int `json:"exit_code"`
		Stdout, Stderr struct {
			Data string `json:"data"`
		}
	}
	raw, _ := json.Marshal(out.StructuredContent)
	json.Unmarshal(raw, &res)
	if b, err := os.ReadFile(filepath.Join(work, "out")); err != nil || string(b) != "written\n" {
		t.Fatalf("the file the command wrote: %q %v", b, err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		got := live.String()
		mu.Unlock()
		if !strings.HasPrefix(got, "streamed\n") {
			return fmt.Errorf("live output: %q", got)
		}
		return nil
	})
	if !hidden {
		if !strings.Contains(res.Stdout.Data, job.ProcessID) {
			t.Fatalf("status says process.run can read the agent's files, but it listed %q", res.Stdout.Data)
		}
		t.Log("this host refuses process.run a mount namespace: shown that status says so, not the isolation itself")
		return
	}
	if res.ExitCode == nil || *res.ExitCode == 0 || res.Stdout.Data != "streamed\n" ||
		strings.Count(res.Stderr.Data, "No such file or directory") != 2 {
		t.Fatalf("status says the agent's files are hidden from process.run, yet (result %s) stdout %q, stderr %q",
			raw, res.Stdout.Data, res.Stderr.Data)
	}
}

// TestFallbackJobsCannotReadTheAgentsFiles: without a user manager, a
// job's supervisor starts through the hide-exec role too: the job does not
// read another job's output, sees in the jobs directory only its own, and
// its own output is captured there. Root, which these tests run as, can
// always make the mount namespace for it.
func TestFallbackJobsCannotReadTheAgentsFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("whether this host gives an ordinary user a mount namespace is its own")
	}
	state := t.TempDir()
	noBus := []string{"DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent/bus", "XDG_RUNTIME_DIR=/nonexistent", "INVOCATION_ID="}
	c := newClient(t, state, noBus)
	first := c.start(map[string]any{"command": "echo first-job-output", "wait_ms": 10000})
	other := filepath.Join(state, "jobs", first.ProcessID, "stdout.cap")
	if _, err := os.Stat(other); err != nil || first.FailureDomain != "shared_parent_cgroup" {
		t.Fatalf("test set-up: domain %q, %v", first.FailureDomain, err)
	}
	res := c.start(map[string]any{"command": "cat " + other + "; ls " + filepath.Join(state, "jobs"), "wait_ms": 10000})
	if res.State != "exited" || res.Output == nil {
		t.Fatalf("the job: %+v", res)
	}
	if out := res.Output.Stdout.Data; out != res.ProcessID+"\n" || !strings.Contains(res.Output.Stderr.Data, "No such file or directory") {
		t.Fatalf("a fallback job saw stdout %q, stderr %q; want only its own directory", out, res.Output.Stderr.Data)
	}
}

// TestRunAsAnOrdinaryUserIsHidden: for an agent that cannot mount (uid
// 65534 here, started by these root tests), process.run goes through a
// user namespace as well: its command reads neither of the agent's
// directories yet writes its working directory, and it still ends with a
// server killed outright.
func TestRunAsAnOrdinaryUserIsHidden(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start the server as another user")
	}
	const nobody = 65534
	// A host may refuse it; the agent then runs commands unhidden and
	// says so, which TestProbeWhereUserNamespacesAreRefused covers.
	testkit.SkipWithoutUserNamespaces(t, nobody)
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(root, "commandcore")
	if out, err := exec.Command("cp", bin, exe).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	state, config, work := filepath.Join(root, "state"), filepath.Join(root, "config"), filepath.Join(root, "work")
	for _, d := range []string{state, config, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(config, "identity.json")
	if err := os.WriteFile(secret, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{state, config, secret, work} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(exe, "mcp", "--state-dir", state, "--config-dir", config)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + work, "DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent/bus"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	marker := "16.1803"
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"process.run","arguments":{"cwd":"` + work + `","command":"echo written > out; cat ` + secret + `; ls ` + filepath.Join(state, "jobs") + `"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"process.run","arguments":{"command":"sleep ` + marker + `"}}}`,
	} {
		if _, err := stdin.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	dec := json.NewDecoder(stdout)
	for {
		var msg struct {
			ID     int `json:"id"`
			Result struct {
				StructuredContent struct {
					ExitCode       *int `json:"exit_code"`
					Stdout, Stderr struct {
						Data string `json:"data"`
					}
				} `json:"structuredContent"`
			} `json:"result"`
		}
		if err := dec.Decode(&msg); err != nil {
			t.Fatalf("the server's answer: %v", err)
		}
		if msg.ID != 2 {
			continue
		}
		res := msg.Result.StructuredContent
		if res.ExitCode == nil || *res.ExitCode == 0 || res.Stdout.Data != "" || strings.Contains(res.Stderr.Data, "secret") ||
			strings.Count(res.Stderr.Data, "No such file or directory") != 2 {
			t.Fatalf("an ordinary user's process.run reached the agent's files: %+v", res)
		}
		break
	}
	if b, err := os.ReadFile(filepath.Join(work, "out")); err != nil || string(b) != "written\n" {
		t.Fatalf("the file the command wrote: %q %v", b, err)
	}
	killServerAndWaitFor(t, cmd, waitSleep(t, marker), "an ordinary user's foreground command")
}

// TestHidingProbeLeavesNothingBehind: the start-up probe's throw-away unit
// and marker files are gone afterwards, whatever it found.
func TestHidingProbeLeavesNothingBehind(t *testing.T) {
	state, config := t.TempDir(), t.TempDir()
	l := launcher.New("", false)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hidden := l.ProbeHiding(ctx, launcher.Hidden{State: state, Config: config})
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
