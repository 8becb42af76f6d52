package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/testkit"
)

// runLocal is one `make run` (scripts/run-local.sh) under a test.
type runLocal struct {
	t   *testing.T
	cmd *exec.Cmd
	mu  sync.Mutex
	out bytes.Buffer
	// From what it printed.
	url, token, panel  string
	status             []string
	agentPID, relayPID int
	done               chan struct{}
}

var (
	runURL   = regexp.MustCompile(`(?m)^  MCP endpoint \(Streamable HTTP\): (\S+)$`)
	runToken = regexp.MustCompile(`(?m)^  Authorization: Bearer (\S+)$`)
	runPIDs  = regexp.MustCompile(`\(agent pid (\d+)\), .* \(relay pid (\d+)\)`)
	runPanel = regexp.MustCompile(`(?m)^Web panel: (\S+) `)
	// The status command the script prints, as words.
	runStatus = regexp.MustCompile(`(?m)^Local views: (.*?) ; `)
)

// startRunLocal runs the script on dir with env added, and waits until it
// has printed its endpoint and its device answers through the relay.
func startRunLocal(t *testing.T, dir string, env ...string) *runLocal {
	t.Helper()
	script, err := filepath.Abs("../../scripts/run-local.sh")
	if err != nil {
		t.Fatal(err)
	}
	r := &runLocal{t: t, done: make(chan struct{})}
	r.cmd = exec.Command(script, bin)
	// Only what the test names: not the machine's LISTEN or FRESH.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LISTEN=") && !strings.HasPrefix(kv, "FRESH=") {
			r.cmd.Env = append(r.cmd.Env, kv)
		}
	}
	r.cmd.Env = append(r.cmd.Env, append([]string{"RUN_DIR=" + dir}, env...)...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.Stdout, r.cmd.Stderr = pw, pw
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			r.mu.Lock()
			r.out.WriteString(sc.Text() + "\n")
			r.mu.Unlock()
		}
		r.cmd.Wait()
	}()
	t.Cleanup(func() {
		r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			r.cmd.Process.Kill()
		}
	})
	testkit.Eventually(t, 30*time.Second, func() error {
		out := r.output()
		m, p := runToken.FindStringSubmatch(out), runPIDs.FindStringSubmatch(out)
		if m == nil || p == nil {
			if r.exited() {
				t.Fatalf("run-local did not come up:\n%s", out)
			}
			return fmt.Errorf("run-local did not come up:\n%s", out)
		}
		r.url, r.token = runURL.FindStringSubmatch(out)[1], m[1]
		if pm, sm := runPanel.FindStringSubmatch(out), runStatus.FindStringSubmatch(out); pm != nil && sm != nil {
			r.panel, r.status = pm[1], strings.Fields(sm[1])
		}
		r.agentPID, _ = strconv.Atoi(p[1])
		r.relayPID, _ = strconv.Atoi(p[2])
		return nil
	})
	// The device links a moment after the script prints.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		k, err := testkit.Dial(t, "e2e-run", testkit.Relayed(r.url, r.token), nil)
		if err == nil {
			if _, isErr := k.Call("process.jobs", nil); !isErr {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the device of run-local never answered: %v\n%s", err, r.output())
		}
	}
	return r
}

func (r *runLocal) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

func (r *runLocal) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// wait waits for the script to end and returns its exit code.
func (r *runLocal) wait() int {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		r.t.Fatalf("run-local did not end:\n%s", r.output())
	}
	return r.cmd.ProcessState.ExitCode()
}

// TestRunLocalKeepsStateAndStopsThePair: `make run` twice gives the same
// device and client token from its named directory; the logs record the
// link and the call without their content; killing its agent says which
// process died and how, and stops the relay; a token no longer active is
// replaced; FRESH=1 starts over.
func TestRunLocalKeepsStateAndStopsThePair(t *testing.T) {
	dir := t.TempDir()
	first := startRunLocal(t, dir, "LISTEN=127.0.0.1:0")
	device := readFile(t, filepath.Join(dir, "agent-config", "identity.json"))
	const marker = "run-local-marker-7f3a"
	k, err := testkit.Dial(t, "e2e-run", testkit.Relayed(first.url, first.token), nil)
	if err != nil {
		t.Fatal(err)
	}
	k.OK("process.start", map[string]any{"command": "echo " + marker, "wait_ms": 10000}, nil)
	first.cmd.Process.Signal(syscall.SIGINT)
	first.wait()
	for _, pid := range []int{first.agentPID, first.relayPID} {
		if processExists(pid) {
			t.Fatalf("pid %d outlived run-local's Ctrl-C", pid)
		}
	}
	agentLog, relayLog := readFile(t, filepath.Join(dir, "agent.log")), readFile(t, filepath.Join(dir, "relay.log"))
	for _, c := range []struct{ log, want string }{
		{agentLog, "link_up"}, {agentLog, "link_end"}, {agentLog, "process.start"},
		{relayLog, ": link up"}, {relayLog, ": link down ("}, {relayLog, "call process.start device "},
	} {
		if !strings.Contains(c.log, c.want) {
			t.Errorf("a log lacks %q:\n%s", c.want, c.log)
		}
	}
	if strings.Contains(agentLog+relayLog, marker) {
		t.Errorf("a job's command reached the logs:\n%s\n%s", agentLog, relayLog)
	}
	// The token is named for what made it, not after a reserved principal
	// (local is the machine's owner), which the panel would show as owner.
	list, err := exec.Command(bin, "relay", "token", "list", "--json", "--state-dir", filepath.Join(dir, "relay")).Output()
	if err != nil || !strings.Contains(string(list), `"name":"make-run"`) || strings.Contains(string(list), `"name":"local"`) {
		t.Errorf("make run's token (%v):\n%s", err, list)
	}

	// The owner's ceiling in the agent's config directory: the status
	// command the script prints reads that directory, not the default.
	if err := os.WriteFile(filepath.Join(dir, "agent-config", "permissions.json"),
		[]byte(`{"schema_version": 1, "tools": ["process.*"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	second := startRunLocal(t, dir)
	if second.token != first.token {
		t.Errorf("the second run printed another token")
	}
	if second.panel == "" || second.panel != first.panel {
		t.Errorf("the panel moved from %q to %q between runs", first.panel, second.panel)
	}
	if len(second.status) < 2 || second.status[0] != bin || second.status[1] != "status" {
		t.Fatalf("run-local printed no status command: %q", second.status)
	}
	status, err := exec.Command(second.status[0], second.status[1:]...).CombinedOutput()
	if err != nil || !strings.Contains(string(status), "Permissions: only process.*") ||
		!strings.Contains(string(status), "Config:      "+filepath.Join(dir, "agent-config")) {
		t.Errorf("the printed status command (%v) reports another config:\n%s", err, status)
	}
	if again := readFile(t, filepath.Join(dir, "agent-config", "identity.json")); !strings.Contains(again, deviceID(t, device)) {
		t.Errorf("the second run enrolled another device")
	}
	if err := syscall.Kill(second.agentPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if rc := second.wait(); rc == 0 {
		t.Errorf("run-local exited 0 after its agent died")
	}
	want := "run-local: the agent (pid " + strconv.Itoa(second.agentPID) + ") was killed by SIGKILL; stopping the relay"
	if out := second.output(); !strings.Contains(out, want) {
		t.Errorf("run-local after its agent died printed:\n%s\nwant %q", out, want)
	}
	if processExists(second.relayPID) {
		t.Error("the relay outlived its agent's death")
	}

	// A token the relay no longer lists as active (revoked here, as it is
	// once its 30 days are over) is replaced by a new one, which answers
	// (startRunLocal calls the device with it).
	id := regexp.MustCompile(`^cct_(tok_[0-9a-f]+)_`).FindStringSubmatch(first.token)
	if id == nil {
		t.Fatal("the printed token has no ID")
	}
	if out, err := exec.Command(bin, "relay", "token", "revoke", id[1], "--state-dir", filepath.Join(dir, "relay")).CombinedOutput(); err != nil {
		t.Fatalf("revoke: %v\n%s", err, out)
	}
	third := startRunLocal(t, dir)
	if third.token == first.token {
		t.Error("run-local printed its revoked token again")
	}
	third.cmd.Process.Signal(syscall.SIGINT)
	third.wait()

	fresh := startRunLocal(t, dir, "FRESH=1")
	if fresh.token == first.token || strings.Contains(readFile(t, filepath.Join(dir, "agent-config", "identity.json")), deviceID(t, device)) {
		t.Error("FRESH=1 kept the token or the device")
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// deviceID is the device_id field of an enrollment credential's JSON.
func deviceID(t *testing.T, credential string) string {
	t.Helper()
	m := regexp.MustCompile(`"device_id":\s*"([^"]+)"`).FindStringSubmatch(credential)
	if m == nil {
		t.Fatalf("no device_id in the credential")
	}
	return m[1]
}
