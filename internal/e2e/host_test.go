package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/testkit"
)

func TestFilesSearchOverMCP(t *testing.T) {
	root := t.TempDir()
	for p, body := range map[string]string{
		"a/notes.txt":        "alpha\nneedle here\nomega\n",
		"a/skip/notes.txt":   "needle hidden\n",
		"b/needle-name.go":   "package b\n",
		"b/regexish.txt":     "a.*b literally\n",
		"b/deeper/other.txt": "no match\n",
	} {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, t.TempDir(), nil)
	var res struct {
		Matches []struct {
			Path string `json:"path"`
			Line int    `json:"line"`
			Text string `json:"text"`
		} `json:"matches"`
		Truncated bool `json:"truncated"`
	}
	c.ok("files.search", map[string]any{"root": root, "text": "needle", "exclude_dirs": []string{"skip"}}, &res)
	if len(res.Matches) != 1 || res.Matches[0].Path != filepath.Join(root, "a/notes.txt") || res.Matches[0].Line != 2 || res.Matches[0].Text != "needle here" {
		t.Fatalf("text search: %+v", res.Matches)
	}
	c.ok("files.search", map[string]any{"root": root, "name": "needle"}, &res)
	if len(res.Matches) != 1 || res.Matches[0].Path != filepath.Join(root, "b/needle-name.go") {
		t.Fatalf("name search: %+v", res.Matches)
	}
	c.ok("files.search", map[string]any{"root": root, "text": "a.*b"}, &res)
	if len(res.Matches) != 1 || res.Matches[0].Path != filepath.Join(root, "b/regexish.txt") {
		t.Fatalf("a regex-looking text must match literally: %+v", res.Matches)
	}
	for _, bad := range []map[string]any{
		{"root": "relative", "text": "x"},
		{"root": root},
		{"root": root, "text": "x", "glob": "*.go"},
	} {
		if code, _ := c.fail("files.search", bad); code != "invalid_argument" {
			t.Errorf("%v: %s, want invalid_argument", bad, code)
		}
	}
	if code, _ := c.fail("files.search", map[string]any{"root": "/nonexistent-root-xyz", "text": "x"}); code != "not_found" {
		t.Errorf("missing root: %s, want not_found", code)
	}
}

func TestSystemMetricsAndProcessListOverMCP(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	var m struct {
		CPU struct {
			Count int `json:"count"`
		} `json:"cpu"`
		BootID string `json:"boot_id"`
		Health struct {
			Verdict string `json:"verdict"`
		} `json:"health"`
		GPU any `json:"gpu"`
	}
	c.ok("system.metrics", map[string]any{}, &m)
	if m.CPU.Count < 1 || m.BootID == "" || m.Health.Verdict == "" || m.GPU != nil {
		t.Fatalf("system.metrics: %+v", m)
	}
	if code, _ := c.fail("system.metrics", map[string]any{"gpus": true}); code != "invalid_argument" {
		t.Fatalf("unknown metrics argument: %s", code)
	}
	res := c.start(map[string]any{"command": "exec sleep 60"})
	t.Cleanup(func() { c.stopAndWait(res.ProcessID) })
	var list struct {
		Processes []struct {
			PID     int    `json:"pid"`
			Name    string `json:"name"`
			Managed bool   `json:"managed"`
		} `json:"processes"`
	}
	child := c.childPID(res.ProcessID)
	// The shell may not have exec'd sleep yet: look until it has.
	found := false
	for i := 0; !found; i++ {
		if i > 100 {
			t.Fatalf("the job's sleep %d is not among managed processes: %+v", child, list.Processes)
		}
		c.ok("process.list", map[string]any{"managed": true, "name": "sleep"}, &list)
		for _, p := range list.Processes {
			if !p.Managed {
				t.Fatalf("managed filter returned %+v", p)
			}
			found = found || p.PID == child
		}
		if !found {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if code, _ := c.fail("process.list", map[string]any{"regex": "x"}); code != "invalid_argument" {
		t.Fatalf("unknown process.list filter: %s", code)
	}
}

func TestProcessRunOverMCP(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	var res struct {
		ExitCode *int `json:"exit_code"`
		Stdout   struct {
			Data     string `json:"data"`
			Encoding string `json:"encoding"`
		} `json:"stdout"`
		OutputCapture struct {
			LimitBytes        int64 `json:"limit_bytes"`
			ObservedBytes     int64 `json:"observed_bytes"`
			TransportComplete bool  `json:"transport_complete"`
		} `json:"output_capture"`
	}
	c.ok("process.run", map[string]any{"command": "echo run-ok; exit 4"}, &res)
	if res.ExitCode == nil || *res.ExitCode != 4 || res.Stdout.Data != "run-ok\n" || res.OutputCapture.ObservedBytes != 7 {
		t.Fatalf("process.run: %+v", res)
	}
	// Without a progress token nothing was streamed, so nothing claims the
	// transport delivered every byte.
	if res.OutputCapture.TransportComplete || res.OutputCapture.LimitBytes <= 0 {
		t.Fatalf("output_capture: %+v", res.OutputCapture)
	}

	// With a progress token, live output arrives as notifications.
	var mu sync.Mutex
	var live strings.Builder
	cl := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			live.WriteString(req.Params.Message)
			mu.Unlock()
		},
	})
	cmd := exec.Command(bin, "mcp", "--state-dir", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := cl.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	params := &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{"command": "for i in 1 2 3; do echo line $i; done"}}
	params.SetProgressToken("tok-1")
	out, err := s.CallTool(ctx, params)
	if err != nil || out.IsError {
		t.Fatalf("process.run with progress: %v %+v", err, out)
	}
	raw, _ := json.Marshal(out.StructuredContent)
	json.Unmarshal(raw, &res)
	// The client SDK dispatches notifications concurrently with the
	// response, so the last notification may be handled just after the
	// result arrives; the server sent them all before it.
	want := "line 1\nline 2\nline 3\n"
	var got string
	testkit.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		got = live.String()
		mu.Unlock()
		if got != want {
			return fmt.Errorf("live output %q, transport_complete %v", got, res.OutputCapture.TransportComplete)
		}
		return nil
	})
	if got != want || !res.OutputCapture.TransportComplete {
		t.Fatalf("live output %q, transport_complete %v", got, res.OutputCapture.TransportComplete)
	}
	if code, _ := c.fail("process.run", map[string]any{"command": "true", "detach": true}); code != "invalid_argument" {
		t.Fatalf("unknown process.run argument: %s", code)
	}
}

// TestProcessRunEndsWithItsClient: a foreground command does not outlive
// the client's connection: when the server's stdin closes mid-call, the
// command's process group is stopped.
func TestProcessRunEndsWithItsClient(t *testing.T) {
	marker := "31.4159"
	cmd, stdin := runOverStdio(t, marker)
	pid := waitSleep(t, marker)
	closed := time.Now()
	stdin.Close()
	for processExists(pid) {
		// The command itself would run for half a minute.
		if time.Since(closed) > 10*time.Second {
			t.Fatal("the foreground command outlived its client's connection")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the server did not exit cleanly after its client left: %v", err)
	}
}

// runOverStdio starts `commandcore mcp` and, speaking raw JSON-RPC on its
// stdin, has it run `sleep marker` with process.run; the call stays open.
func runOverStdio(t *testing.T, marker string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(bin, "mcp", "--state-dir", t.TempDir(), "--config-dir", t.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"process.run","arguments":{"command":"sleep ` + marker + `"}}}`,
	} {
		if _, err := stdin.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	return cmd, stdin
}

// sleepPID returns the PID of a live `sleep marker`, or 0.
func sleepPID(marker string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && string(b) == "sleep\x00"+marker+"\x00" && processExists(atoi(e.Name())) {
			return atoi(e.Name())
		}
	}
	return 0
}

// waitSleep waits for `sleep marker` to start and returns its PID.
func waitSleep(t *testing.T, marker string) int {
	t.Helper()
	for i := 0; ; i++ {
		if pid := sleepPID(marker); pid != 0 {
			return pid
		}
		if i > 250 {
			t.Fatal("the foreground command never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0
		}
		n = n*10 + int(r-'0')
	}
	return n
}

// TestProcessRunEndsWithAKilledServer: a foreground command does not
// outlive a `commandcore mcp` that is killed outright (SIGKILL), which can
// stop nothing itself: the kernel ends the command with it.
func TestProcessRunEndsWithAKilledServer(t *testing.T) {
	marker := "29.9792"
	cmd, _ := runOverStdio(t, marker)
	killServerAndWaitFor(t, cmd, waitSleep(t, marker), "the foreground command")
}

// killServerAndWaitFor SIGKILLs server and fails unless the command pid
// (what) ends with it within 10 s.
func killServerAndWaitFor(t *testing.T, server *exec.Cmd, pid int, what string) {
	t.Helper()
	killed := time.Now()
	server.Process.Signal(syscall.SIGKILL)
	server.Wait()
	for processExists(pid) {
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("%s outlived its killed server", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProcessListArgsAndThisAgentsJobs: process.list shows the arguments of
// the owner's processes (a job's shell exec'd into "sleep 61"), and
// managed means the jobs of this agent's state directory, not those of
// another agent running as the same user.
func TestProcessListArgsAndThisAgentsJobs(t *testing.T) {
	stateA, stateB := t.TempDir(), t.TempDir()
	a, b := newClient(t, stateA, nil), newClient(t, stateB, nil)
	mine := a.start(map[string]any{"command": "exec sleep 61"})
	t.Cleanup(func() { a.stopAndWait(mine.ProcessID) })
	theirs := b.start(map[string]any{"command": "exec sleep 62"})
	t.Cleanup(func() { b.stopAndWait(theirs.ProcessID) })
	myChild, theirChild := a.childPID(mine.ProcessID), b.childPID(theirs.ProcessID)
	mySupervisor := a.status(mine.ProcessID).Identity.Supervisor.PID

	type proc struct {
		PID       int    `json:"pid"`
		Args      string `json:"args"`
		Managed   bool   `json:"managed"`
		ProcessID string `json:"process_id"`
		Cgroup    string `json:"cgroup"`
	}
	var list struct {
		Processes []proc `json:"processes"`
	}
	byPID := func() map[int]proc {
		m := map[int]proc{}
		for _, p := range list.Processes {
			m[p.PID] = p
		}
		return m
	}
	// The shell may not have exec'd sleep yet: look until it has.
	for i := 0; ; i++ {
		list.Processes = nil
		a.ok("process.list", map[string]any{"managed": true}, &list)
		if byPID()[myChild].Args == "sleep 61" {
			break
		}
		if i > 100 {
			t.Fatalf("the job's sleep %d is not listed with its arguments: %+v", myChild, list.Processes)
		}
		time.Sleep(50 * time.Millisecond)
	}
	procs := byPID()
	if p := procs[myChild]; p.ProcessID != mine.ProcessID {
		t.Errorf("this agent's job process: %+v", p)
	}
	if p, ok := procs[mySupervisor]; !ok || !strings.Contains(p.Args, " supervise "+filepath.Join(stateA, "jobs", mine.ProcessID)) {
		t.Errorf("the job's supervisor %d: %+v (listed %v)", mySupervisor, p, ok)
	}
	for pid, p := range procs {
		if !p.Managed || p.ProcessID != mine.ProcessID {
			t.Errorf("managed lists process %d of another job: %+v", pid, p)
		}
	}
	if _, ok := procs[theirChild]; ok {
		t.Errorf("managed lists the other agent's job process %d", theirChild)
	}
	for i := 0; ; i++ {
		list.Processes = nil // decoding reuses elements and keeps fields the answer omits
		a.ok("process.list", map[string]any{"pid": theirChild}, &list)
		if len(list.Processes) == 1 && list.Processes[0].Args == "sleep 62" {
			break
		}
		if i > 100 {
			t.Fatalf("the other agent's job process %d: %+v", theirChild, list.Processes)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if p := list.Processes[0]; p.Managed || p.ProcessID != "" {
		t.Errorf("the other agent's job process is managed here: %+v", p)
	}
}
