package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/testkit"
)

// side is one way to reach a device: `commandcore mcp` over stdio, or an
// agent through the relay.
type side struct {
	c *client
	// jobsDir is where the device keeps its jobs.
	jobsDir string
	// crash SIGKILLs the process serving c's tools; revive starts a new
	// one and returns a client that reaches it.
	crash  func()
	revive func() *client
	// other is a client of another principal, nil when the side has one
	// principal only.
	other func() *client
}

func stdioSide(t *testing.T) *side {
	state := t.TempDir()
	s := &side{jobsDir: filepath.Join(state, "jobs")}
	s.c = newClient(t, state, nil)
	s.crash = func() { s.c.cmd.Process.Signal(syscall.SIGKILL) }
	s.revive = func() *client {
		s.c.session.Close()
		s.c = newClient(t, state, nil)
		return s.c
	}
	return s
}

func relaySide(t *testing.T) *side {
	e, c := onlineDevice(t)
	s := &side{c: c, jobsDir: filepath.Join(e.agentState, "jobs")}
	s.crash = func() { e.agent.Process.Signal(syscall.SIGKILL) }
	s.revive = func() *client {
		e.agent.Wait()
		e.startAgent()
		waitOnline(t, c, nil)
		return c
	}
	s.other = func() *client {
		tok, _ := e.newToken("dev1", "process.*")
		b, err := e.connect("/mcp/dev1", tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return s
}

// startRaw calls process.start without failing the test on a transport
// error, for calls that race a crash or each other.
func startRaw(c *client, args map[string]any) (*jobs.StartResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), testkit.CallTimeout)
	defer cancel()
	raw, isErr, err := testkit.Call(ctx, c.session, "process.start", args)
	if err != nil {
		return nil, err
	}
	if isErr {
		return nil, fmt.Errorf("process.start failed: %s", raw)
	}
	var res jobs.StartResult
	return &res, json.Unmarshal(raw, &res)
}

// firstJob waits until a job directory with its job.json appears in dir
// and returns its name, the job's ID.
func firstJob(t *testing.T, dir string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join(dir, e.Name(), "job.json")); err == nil {
				return e.Name()
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
	t.Fatal("no job appeared")
	return ""
}

func jobCount(t *testing.T, c *client) int {
	t.Helper()
	var list struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	c.ok("process.jobs", map[string]any{}, &list)
	return len(list.Jobs)
}

// checkIdempotentStart: a key starts one job, however the start is
// repeated: again, after the server was SIGKILLed while the start was
// under way, 20 times at once; another command with the key is a
// conflict, and another principal's same key starts its own job.
func checkIdempotentStart(t *testing.T, s *side) {
	key := "deploy-" + fmt.Sprint(time.Now().UnixNano())
	args := map[string]any{"command": "exec sleep 60", "idempotency_key": key}
	// The server dies as soon as the job is recorded, before its launch
	// can be answered.
	answered := make(chan error, 1)
	go func() {
		res, err := startRaw(s.c, args)
		if err == nil {
			err = fmt.Errorf("answered %s before the crash", res.ProcessID)
		}
		answered <- err
	}()
	id := firstJob(t, s.jobsDir)
	s.crash()
	if err := <-answered; strings.HasPrefix(err.Error(), "answered") {
		t.Logf("the crash came after the answer (%v); the retry below still must find the job", err)
	}
	c := s.revive()
	again := c.start(args)
	if !again.Reused || again.ProcessID != id {
		t.Fatalf("retry after the crash: job %s reused %v; want job %s reused", again.ProcessID, again.Reused, id)
	}
	t.Cleanup(func() { c.stopAndWait(id) })
	var wg sync.WaitGroup
	results := make([]*jobs.StartResult, 20)
	errs := make([]error, 20)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = startRaw(c, args)
		}()
	}
	wg.Wait()
	for i, r := range results {
		if errs[i] != nil || r.ProcessID != id || !r.Reused {
			t.Fatalf("concurrent start %d: %+v, %v; want job %s reused", i, r, errs[i], id)
		}
	}
	if n := jobCount(t, c); n != 1 {
		t.Fatalf("%d jobs after 22 starts with one key, want 1", n)
	}
	if code, msg := c.fail("process.start", map[string]any{"command": "exec sleep 61", "idempotency_key": key}); code != "conflict" || !strings.Contains(msg, id) {
		t.Fatalf("another command with the key: %s %q, want conflict naming %s", code, msg, id)
	}
	if s.other != nil {
		b := s.other()
		theirs := b.start(args)
		if theirs.Reused || theirs.ProcessID == id {
			t.Fatalf("another principal's same key: %+v, want a job of its own", theirs)
		}
		b.stopAndWait(theirs.ProcessID)
	}
}

func TestIdempotentStart(t *testing.T)      { checkIdempotentStart(t, stdioSide(t)) }
func TestRelayIdempotentStart(t *testing.T) { checkIdempotentStart(t, relaySide(t)) }

// waitFor calls process.wait on one job with until.
func waitFor(c *client, id string, until map[string]any, timeoutMS int) jobs.WaitResult {
	c.t.Helper()
	var res jobs.WaitResult
	c.ok("process.wait", map[string]any{"process_ids": []string{id}, "until": until, "timeout_ms": timeoutMS}, &res)
	return res
}

func checkUntil(t *testing.T, c *client) {
	ready := c.start(map[string]any{"command": "sleep 1; printf 'boot\\nready\\n'; exec sleep 60"}).ProcessID
	defer c.stopAndWait(ready)
	if res := waitFor(c, ready, map[string]any{"output": map[string]any{"text": "ready"}}, 20000); res.Met != "output" || res.Stream != "stdout" || res.Offset == nil || *res.Offset != 5 {
		t.Fatalf("ready after 1 s: %+v, want met output on stdout at 5", res)
	}
	split := c.start(map[string]any{"command": "printf 'rea'; sleep 0.2; printf 'dy'; exec sleep 60"}).ProcessID
	defer c.stopAndWait(split)
	if res := waitFor(c, split, map[string]any{"output": map[string]any{"text": "ready", "stream": "stdout"}}, 20000); res.Met != "output" || *res.Offset != 0 {
		t.Fatalf("text in two writes 200 ms apart: %+v", res)
	}
	ends := c.start(map[string]any{"command": "echo bye"}).ProcessID
	if res := waitFor(c, ends, map[string]any{"output": map[string]any{"text": "ready"}}, 20000); res.Met != "ended" || len(res.Ended) != 1 {
		t.Fatalf("a job that ends first: %+v, want met ended", res)
	}
	if res := waitFor(c, split, map[string]any{"output": map[string]any{"text": "never"}}, 500); res.Met != "timeout" || len(res.Pending) != 1 {
		t.Fatalf("a text that never comes: %+v, want met timeout", res)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	server := c.start(map[string]any{"command": fmt.Sprintf("sleep 0.5; exec python3 -m http.server %d --bind 127.0.0.1", port)}).ProcessID
	defer c.stopAndWait(server)
	if res := waitFor(c, server, map[string]any{"port": port}, 20000); res.Met != "port" || len(res.Pending) != 1 {
		t.Fatalf("a server that comes to listen: %+v, want met port", res)
	}
	if conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		t.Fatalf("met port, yet nothing answers: %v", err)
	} else {
		conn.Close()
	}
	path := filepath.Join(t.TempDir(), "out", "done")
	maker := c.start(map[string]any{"command": fmt.Sprintf("sleep 0.5; mkdir -p %s; touch %s; exec sleep 60", filepath.Dir(path), path)}).ProcessID
	defer c.stopAndWait(maker)
	if res := waitFor(c, maker, map[string]any{"path": path}, 20000); res.Met != "path" {
		t.Fatalf("a path that comes to exist: %+v, want met path", res)
	}
	for field, args := range map[string]map[string]any{
		"exactly one job":          {"process_ids": []string{ready, split}, "until": map[string]any{"path": "/x"}},
		"until.output.text":        {"process_ids": []string{ready}, "until": map[string]any{"output": map[string]any{"text": ""}}},
		"until.port":               {"process_ids": []string{ready}, "until": map[string]any{"port": 70000}},
		"until.path":               {"process_ids": []string{ready}, "until": map[string]any{"path": "relative"}},
		"until.output.from_offset": {"process_ids": []string{ready}, "until": map[string]any{"output": map[string]any{"text": "a", "from_offset": map[string]any{"stdout": -1}}}},
	} {
		if code, msg := c.fail("process.wait", args); code != "invalid_argument" || !strings.Contains(msg, field) {
			t.Errorf("%v: %s %q, want invalid_argument naming %s", args, code, msg, field)
		}
	}
	for _, key := range []string{strings.Repeat("k", 129), "line\nbreak", "tab\t"} {
		if code, msg := c.fail("process.start", map[string]any{"command": "true", "idempotency_key": key}); code != "invalid_argument" || !strings.Contains(msg, "idempotency_key") {
			t.Errorf("key %q: %s %q, want invalid_argument naming idempotency_key", key, code, msg)
		}
	}
}

func TestUntil(t *testing.T) { checkUntil(t, newClient(t, t.TempDir(), nil)) }
func TestRelayUntil(t *testing.T) {
	_, c := onlineDevice(t)
	checkUntil(t, c)
}

// checkREPLWithUntil drives Python on a terminal as an agent would: wait
// for its first prompt, then each input with until the next prompt, so
// every reply holds the echo, the answer and the prompt.
func checkREPLWithUntil(t *testing.T, c *client) {
	id := c.start(map[string]any{"command": "exec python3 -q -i", "pty": map[string]any{"cols": 80, "rows": 24}}).ProcessID
	defer c.stopAndWait(id)
	if res := waitFor(c, id, map[string]any{"output": map[string]any{"text": ">>> "}}, 20000); res.Met != "output" {
		t.Fatalf("Python's first prompt: %+v", res)
	}
	for i := range 20 {
		res := c.send(map[string]any{"process_id": id, "data": "6*7\n", "until": ">>> ", "wait_ms": 10000})
		got := string(decode(t, res.Output.Stdout))
		if res.UntilMet == nil || !*res.UntilMet || got != "6*7\r\n42\r\n>>> " {
			t.Fatalf("round %d: %q, until_met %v; want the echo, 42 and the prompt", i, got, res.UntilMet)
		}
	}
}

func TestREPLWithUntil(t *testing.T) { checkREPLWithUntil(t, newClient(t, t.TempDir(), nil)) }
func TestRelayREPLWithUntil(t *testing.T) {
	_, c := onlineDevice(t)
	checkREPLWithUntil(t, c)
}
