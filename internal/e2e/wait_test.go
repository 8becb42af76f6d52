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
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/testkit"
)

// waitResult is process.wait's result as the tests read it.
type waitResult struct {
	Ended   []record `json:"ended"`
	Pending []string `json:"pending"`
}

// TestProcessWaitAnyAndAll: of three jobs ending after 1, 2 and 3 s, mode
// any returns with the first ended and the others pending (so before the
// last ended), mode all with all three; timeout_ms returns pending.
func TestProcessWaitAnyAndAll(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	var ids []string
	for i := 1; i <= 3; i++ {
		ids = append(ids, c.start(map[string]any{"command": fmt.Sprintf("sleep %d; exit %d", i, 10+i)}).ProcessID)
	}
	var anyRes waitResult
	c.ok("process.wait", map[string]any{"process_ids": ids, "timeout_ms": 30000}, &anyRes)
	if len(anyRes.Ended) != 1 || anyRes.Ended[0].ProcessID != ids[0] || anyRes.Ended[0].State != "exited" ||
		*anyRes.Ended[0].ExitCode != 11 || !anyRes.Ended[0].Terminal {
		t.Fatalf("mode any ended %+v", anyRes.Ended)
	}
	if strings.Join(anyRes.Pending, ",") != ids[1]+","+ids[2] {
		t.Fatalf("mode any pending %v, want the 2 s and 3 s jobs", anyRes.Pending)
	}

	var all waitResult
	c.ok("process.wait", map[string]any{"process_ids": ids, "mode": "all", "timeout_ms": 30000}, &all)
	if len(all.Ended) != 3 || len(all.Pending) != 0 {
		t.Fatalf("mode all: %+v", all)
	}
	for i, r := range all.Ended {
		if r.ProcessID != ids[i] || r.State != "exited" || *r.ExitCode != 11+i || r.CompletedAt == nil {
			t.Errorf("mode all, job %d: %+v", i+1, r)
		}
	}

	live := c.start(map[string]any{"command": "sleep 60"}).ProcessID
	var timedOut waitResult
	began := time.Now()
	c.ok("process.wait", map[string]any{"process_ids": []string{ids[0], live}, "mode": "all", "timeout_ms": 500}, &timedOut)
	if len(timedOut.Ended) != 1 || strings.Join(timedOut.Pending, ",") != live {
		t.Fatalf("timeout_ms 500: %+v", timedOut)
	}
	if d := time.Since(began); d < 500*time.Millisecond {
		t.Fatalf("a wait with timeout_ms 500 returned after %v", d)
	}
	c.stopAndWait(live)
}

// TestProcessWaitRefusesBadInput: 33 ids, an id twice, an unknown mode
// and a timeout past 600 s are invalid_argument; an unknown job not_found.
func TestProcessWaitRefusesBadInput(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	id := c.start(map[string]any{"command": "true", "wait_ms": 10000}).ProcessID
	many := make([]string, 33)
	for i := range many {
		many[i] = fmt.Sprintf("0b1e5f0c-58a4-4b8e-9a55-d5f1a6b9e%03d", i)
	}
	for name, args := range map[string]map[string]any{
		"33 ids":       {"process_ids": many},
		"no ids":       {"process_ids": []string{}},
		"an id twice":  {"process_ids": []string{id, id}},
		"bad mode":     {"process_ids": []string{id}, "mode": "some"},
		"timeout":      {"process_ids": []string{id}, "timeout_ms": 600001},
		"unknown flag": {"process_ids": []string{id}, "wait_ms": 5},
	} {
		if code, msg := c.fail("process.wait", args); code != "invalid_argument" {
			t.Errorf("%s: %s %s", name, code, msg)
		}
	}
	if code, _ := c.fail("process.wait", map[string]any{"process_ids": many[:32]}); code != "not_found" {
		t.Errorf("32 unknown ids: %s, want not_found", code)
	}
}

// TestProcessWaitIsItsOwnNameInTheCeiling: the owner's ceiling names
// process.wait on its own: a ceiling of process.status refuses it, one of
// process.wait admits it alone.
func TestProcessWaitIsItsOwnNameInTheCeiling(t *testing.T) {
	for tools, want := range map[string]string{`["process.status"]`: "permission_denied", `["process.wait"]`: "not_found"} {
		cfg := t.TempDir()
		if err := os.WriteFile(filepath.Join(cfg, "permissions.json"), []byte(`{"schema_version":1,"tools":`+tools+`}`), 0o600); err != nil {
			t.Fatal(err)
		}
		c := newClient(t, t.TempDir(), nil, "--config-dir", cfg)
		if code, _ := c.fail("process.wait", map[string]any{"process_ids": []string{"0b1e5f0c-58a4-4b8e-9a55-d5f1a6b9e001"}}); code != want {
			t.Errorf("process.wait under a ceiling of %s: %s, want %s", tools, code, want)
		}
	}
}

// TestProcessWaitCancelled: a wait cancelled by its client ends on the
// server at once, as its journal entry's duration shows.
func TestProcessWaitCancelled(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state, nil)
	live := c.start(map[string]any{"command": "sleep 120"}).ProcessID
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	if _, err := c.session.CallTool(ctx, &mcp.CallToolParams{Name: "process.wait",
		Arguments: map[string]any{"process_ids": []string{live}, "timeout_ms": 600000}}); err == nil {
		t.Fatal("a cancelled wait returned a result")
	}
	var took int64 = -1
	testkit.EventuallyEvery(t, 20*time.Second, 100*time.Millisecond, func() error {
		out, _, _ := run(t, "activity", "--last", "100", "--json", "--state-dir", state)
		for _, line := range strings.Split(out, "\n") {
			var e struct {
				Tool       string `json:"tool"`
				DurationMS int64  `json:"duration_ms"`
			}
			if json.Unmarshal([]byte(line), &e) == nil && e.Tool == "process.wait" {
				took = e.DurationMS
			}
		}
		if took < 0 {
			return fmt.Errorf("the cancelled wait's journal entry: %d ms", took)
		}
		return nil
	})
	// The wait would have run for ten minutes.
	if took < 0 || took > 30000 {
		t.Fatalf("the cancelled wait's journal entry: %d ms", took)
	}
	if rec := c.status(live); rec.State != "running" {
		t.Fatalf("cancelling a wait touched the job: %s", rec.State)
	}
	c.stopAndWait(live)
}

// progressLog records when progress notifications arrive.
type progressLog struct {
	mu    sync.Mutex
	times []time.Time
}

func (p *progressLog) add(*mcp.ProgressNotificationParams) {
	p.mu.Lock()
	p.times = append(p.times, time.Now())
	p.mu.Unlock()
}

// check asserts at least two notifications between began and ended, none
// of the gaps (from the start, between them, to the end) over 12 s.
func (p *progressLog) check(t *testing.T, began, ended time.Time) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.times) < 2 {
		t.Fatalf("%d progress notifications in %v", len(p.times), ended.Sub(began))
	}
	prev := began
	for _, at := range append(append([]time.Time(nil), p.times...), ended) {
		if gap := at.Sub(prev); gap > 12*time.Second {
			t.Errorf("%v without a progress notification", gap)
		}
		prev = at
	}
}

// waitWithProgress waits for job with a progress token and returns the
// result and when the call began and ended.
func waitWithProgress(t *testing.T, s *mcp.ClientSession, job string) (waitResult, time.Time, time.Time) {
	t.Helper()
	params := &mcp.CallToolParams{Name: "process.wait", Arguments: map[string]any{"process_ids": []string{job}, "timeout_ms": 60000}}
	params.SetProgressToken("wait-tok")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	began := time.Now()
	res, err := s.CallTool(ctx, params)
	ended := time.Now()
	if err != nil || res.IsError {
		t.Fatalf("process.wait with a progress token: %v %+v", err, res)
	}
	var out waitResult
	raw, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(raw, &out)
	return out, began, ended
}

// TestProcessWaitProgressOverStdio: waiting 25 s for a job, a client with a
// progress token hears from the server at least every 10 s.
func TestProcessWaitProgressOverStdio(t *testing.T) {
	t.Parallel()
	var log progressLog
	cl := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) { log.add(req.Params) },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := cl.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(bin, "mcp", "--state-dir", t.TempDir(), "--config-dir", t.TempDir())}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := &client{t: t, session: s, kit: &testkit.Client{TB: t, Session: s}}
	job := c.start(map[string]any{"command": "sleep 25"}).ProcessID
	res, began, ended := waitWithProgress(t, s, job)
	if len(res.Ended) != 1 || res.Ended[0].State != "exited" {
		t.Fatalf("the wait ended with %+v", res)
	}
	log.check(t, began, ended)
}

// TestProcessWaitThroughTheRelay: progress crosses the relay as well, and
// another principal's job answers not_found, exactly as a job that does
// not exist.
func TestProcessWaitThroughTheRelay(t *testing.T) {
	t.Parallel()
	e := startRelay(t)
	e.enrollAgent("dev1")
	token, _ := e.newToken("dev1", "*")
	var log progressLog
	a, err := e.connect("/mcp/dev1", token, log.add)
	if err != nil {
		t.Fatal(err)
	}
	waitOnline(t, a, nil)
	tokB, _ := e.newToken("dev1", "process.*")
	b, err := e.connect("/mcp/dev1", tokB, nil)
	if err != nil {
		t.Fatal(err)
	}

	job := a.start(map[string]any{"command": "sleep 25"}).ProcessID
	_, missing := b.fail("process.wait", map[string]any{"process_ids": []string{"0b1e5f0c-58a4-4b8e-9a55-d5f1a6b9e001"}, "timeout_ms": 0})
	code, hidden := b.fail("process.wait", map[string]any{"process_ids": []string{job}, "timeout_ms": 0})
	if code != "not_found" || hidden != missing {
		t.Fatalf("b's wait on a's job: %s %q; on no job: %q", code, hidden, missing)
	}

	// process.wait is its own name in a token's scope.
	tokWait, _ := e.newToken("dev1", "process.wait")
	w, err := e.connect("/mcp/dev1", tokWait, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, err := w.session.ListTools(context.Background(), nil)
	if err != nil || len(list.Tools) != 1 || list.Tools[0].Name != "process.wait" {
		t.Fatalf("a process.wait token's tools: %v %+v", err, list)
	}
	if code, _ := w.fail("process.wait", map[string]any{"process_ids": []string{job}, "timeout_ms": 0}); code != "not_found" {
		t.Fatalf("a process.wait token's wait on another principal's job: %s", code)
	}

	res, began, ended := waitWithProgress(t, a.session, job)
	if len(res.Ended) != 1 || res.Ended[0].ProcessID != job || res.Ended[0].State != "exited" {
		t.Fatalf("the wait through the relay ended with %+v", res)
	}
	log.check(t, began, ended)
}

// TestJobsWaitCLI: `jobs wait` exits 0 when its condition is met and 1 at
// its timeout, printing the ended and the pending jobs.
func TestJobsWaitCLI(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state, nil)
	quick := c.start(map[string]any{"command": "sleep 1; exit 3"}).ProcessID
	live := c.start(map[string]any{"command": "sleep 60"}).ProcessID

	out, errOut, code := run(t, "jobs", "wait", quick, live, "--timeout", "30s", "--state-dir", state)
	if code != 0 || !strings.Contains(out, quick) || !strings.Contains(out, "exited") || !strings.Contains(out, live+"  pending") {
		t.Fatalf("jobs wait --any: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, "jobs", "wait", quick, live, "--all", "--timeout", "300ms", "--json", "--state-dir", state)
	var res waitResult
	if code != 1 || json.Unmarshal([]byte(out), &res) != nil || len(res.Ended) != 1 || *res.Ended[0].ExitCode != 3 ||
		strings.Join(res.Pending, ",") != live || !strings.Contains(errOut, "timed out") {
		t.Fatalf("jobs wait --all at its timeout: exit %d\n%s%s", code, out, errOut)
	}
	if _, _, code := run(t, "jobs", "wait", quick, "--any", "--all", "--state-dir", state); code != 2 {
		t.Fatalf("jobs wait --any --all: exit %d, want 2", code)
	}
	if _, _, code := run(t, "jobs", "wait", "--state-dir", state); code != 2 {
		t.Fatalf("jobs wait without IDs: exit %d, want 2", code)
	}
	c.stopAndWait(live)
}

// TestUntilOutputAsTheDescriptionSaysIt: through the relay, with the
// official Go SDK client, process.wait {until: {output: "ready"}} (the
// form the tool's description suggests) ends the wait when the job
// prints it, met output with the stream and the offset where it begins;
// a number there is refused naming what until.output takes.
func TestUntilOutputAsTheDescriptionSaysIt(t *testing.T) {
	e := startRelay(t)
	c := e.online()
	job := c.start(map[string]any{"command": "printf 'booting\\n'; sleep 0.3; printf 'ready\\n'; sleep 30"}).ProcessID
	var res struct {
		Met     string   `json:"met"`
		Stream  string   `json:"stream"`
		Offset  *int64   `json:"offset"`
		Pending []string `json:"pending"`
	}
	c.ok("process.wait", map[string]any{"process_ids": []string{job}, "timeout_ms": 20000, "until": map[string]any{"output": "ready"}}, &res)
	if res.Met != "output" || res.Stream != "stdout" || res.Offset == nil || *res.Offset != 8 || len(res.Pending) != 1 {
		t.Fatalf("the wait ended with %+v", res)
	}
	code, msg := c.fail("process.wait", map[string]any{"process_ids": []string{job}, "until": map[string]any{"output": 5}})
	if code != "invalid_argument" || msg != `argument "until.output" must be a string or an object` {
		t.Fatalf("until.output 5: %s %q", code, msg)
	}
	c.ok("process.stop", map[string]any{"process_id": job}, nil)
}
