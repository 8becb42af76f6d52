package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/testkit"
	"github.com/commandcore/commandcore/internal/toolresult"
	"github.com/commandcore/commandcore/internal/transport"
)

const marker = "MARKER-a7c2e9f4"

// countingObserver counts what the relay reports for metrics.
type countingObserver struct {
	mu       sync.Mutex
	calls    map[string]int // "tool outcome"
	ends     map[transport.End]int
	refusals map[string]int
}

func newCountingObserver() *countingObserver {
	return &countingObserver{calls: map[string]int{}, ends: map[transport.End]int{}, refusals: map[string]int{}}
}

func (o *countingObserver) Call(tool, outcome string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls[tool+" "+outcome]++
}

func (o *countingObserver) LinkEnd(kind transport.End) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ends[kind]++
}

func (o *countingObserver) EnrollRefused(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refusals[reason]++
}

// auditDevice serves process.jobs (ok), process.status (not_found) and
// process.stop (a failure whose code is not a code word), echoing what it
// is sent into its results.
func auditDevice() *mcp.Server {
	d := fakeDevice()
	schema := map[string]any{"type": "object"}
	d.AddTool(&mcp.Tool{Name: "process.jobs", InputSchema: schema}, func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return toolresult.Success(map[string]any{"echo": string(r.Params.Arguments)}), nil
	})
	d.AddTool(&mcp.Tool{Name: "process.status", InputSchema: schema}, func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return toolresult.Failure(errcode.New(errcode.NotFound, "no job %s", r.Params.Arguments)), nil
	})
	d.AddTool(&mcp.Tool{Name: "process.stop", InputSchema: schema}, func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "x"}},
			StructuredContent: map[string]any{"error": map[string]any{"code": "Bad " + marker, "message": marker}}}, nil
	})
	return d
}

func (h *harness) session(tb testing.TB, path, token string) *mcp.ClientSession {
	tb.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "audit-test", Version: "1"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: h.hs.URL + path, HTTPClient: relaytest.HTTPClient(token)}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

type auditRow struct{ principal, token, device, tool, outcome, code string }

// TestAuditRecordsEveryCall: forwarded calls, devices.list and refused
// requests (unknown device, tool out of scope, made-up tool, offline
// device) each leave one content-free entry, and are counted for metrics
// and logged (with the link's up and down) in the audit's words; a
// request with a bad token is counted for its address and minute instead,
// and for metrics, and not logged.
func TestAuditRecordsEveryCall(t *testing.T) {
	obs := newCountingObserver()
	var logged bytes.Buffer
	var logMu sync.Mutex
	h := newHarness(t, func(s *Server) {
		s.Observer = obs
		s.Log = log.New(lockedWriter{&logMu, &logged}, "", 0)
	})
	tok, bearer, err := h.st.CreateToken(store.TokenSpec{Name: "a", Devices: []string{"*"}, Tools: []string{"process.*", "devices.list"}, TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	conn := h.link(t, auditDevice())
	dev, id := h.dev.ID, tok.ID

	one := h.session(t, "/mcp/dev", bearer)
	call := func(s *mcp.ClientSession, name string, args map[string]any) {
		t.Helper()
		if _, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args}); err != nil && !strings.Contains(err.Error(), "unknown tool") {
			t.Fatalf("%s: %v", name, err)
		}
	}
	call(one, "process.jobs", map[string]any{"filter": marker})
	call(one, "process.status", map[string]any{"process_id": marker})
	call(one, "process.stop", map[string]any{"process_id": marker})
	call(one, "system.metrics", map[string]any{"gpu": marker}) // out of the token's scope
	call(one, "evil."+marker, map[string]any{"x": marker})     // no such tool

	all := h.session(t, "/mcp", bearer)
	call(all, "devices.list", nil)
	call(all, "process.jobs", map[string]any{"device": "dev", "x": marker})
	call(all, "process.jobs", map[string]any{"device": "nope-" + marker})

	for _, r := range []struct{ path, token string }{
		{"/mcp", "cct_" + marker},       // not a token
		{"/mcp/nope-" + marker, bearer}, // no such device
	} {
		req, _ := http.NewRequest("POST", h.hs.URL+r.path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"process.jobs","arguments":{"m":"`+marker+`"}}}`))
		req.Header.Set("Authorization", "Bearer "+r.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	conn.Close()
	testkit.Eventually(t, 20*time.Second, func() error {
		if h.srv.connected(dev) != nil {
			return errors.New("the link never ended")
		}
		return nil
	})
	call(one, "process.jobs", nil) // offline

	h.srv.audit.flush()
	entries, err := h.st.Audit(100)
	if err != nil {
		t.Fatal(err)
	}
	want := []auditRow{
		{id, id, dev, "process.jobs", "ok", ""},
		{id, id, dev, "process.status", "failed", "not_found"},
		{id, id, dev, "process.stop", "failed", "unknown"},
		{id, id, dev, "system.metrics", "failed", "permission_denied"},
		{id, id, dev, "unknown", "failed", "not_found"},
		{id, id, "", "devices.list", "ok", ""},
		{id, id, dev, "process.jobs", "ok", ""},
		{id, id, "", "process.jobs", "failed", "not_found"},
		{id, id, "", "unknown", "failed", "not_found"},
		{id, id, dev, "process.jobs", "failed", "device_offline"},
	}
	if len(entries) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(entries), len(want), entries)
	}
	for i, e := range entries {
		got := auditRow{e.Principal, e.TokenID, e.Device, e.Tool, e.Outcome, e.Code}
		if got != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got, want[i])
		}
		if e.At.IsZero() || e.DurationUS < 0 {
			t.Errorf("entry %d: time %v, duration %d", i, e.At, e.DurationUS)
		}
	}

	if counts, err := h.st.RefusalCounts(10); err != nil || len(counts) != 1 || counts[0].Source != "127.0.0.1" || counts[0].Count != 1 {
		t.Errorf("refusal counts %+v %v, want the bad token's request", counts, err)
	}

	// Nothing the clients or the device sent reached the database.
	for _, name := range []string{store.File, store.File + "-wal"} {
		b, err := os.ReadFile(filepath.Join(h.stateDir, name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(marker)) {
			t.Fatalf("the marker is in %s", name)
		}
	}

	// The link's end is logged as its handler returns, a moment after the
	// call that found the device offline.
	var lines []string
	// On timeout the checks below say what the log lacks.
	_ = testkit.Poll(5*time.Second, func() error {
		logMu.Lock()
		lines = strings.Split(strings.TrimSuffix(logged.String(), "\n"), "\n")
		logMu.Unlock()
		if !strings.Contains(strings.Join(lines, "\n"), ": link down (") {
			return errors.New("no link down logged")
		}
		return nil
	})
	if strings.Contains(strings.Join(lines, "\n"), marker) {
		t.Errorf("the marker is in the relay's log:\n%s", strings.Join(lines, "\n"))
	}
	var calls []string
	var linkUp, linkDown bool
	for _, l := range lines {
		switch {
		case l == "device "+dev+": link up":
			linkUp = true
		case strings.HasPrefix(l, "device "+dev+": link down (remote_close) after "):
			linkDown = true
		case strings.HasPrefix(l, "call "):
			// The duration varies; the rest is the audit's.
			calls = append(calls, l[:strings.LastIndex(l, " in ")])
		}
	}
	if !linkUp || !linkDown {
		t.Errorf("the relay's log lacks the link's up (%v) or down (%v):\n%s", linkUp, linkDown, strings.Join(lines, "\n"))
	}
	wantCalls := []string{
		"call process.jobs device " + dev + ": ok -",
		"call process.status device " + dev + ": failed not_found",
		"call process.stop device " + dev + ": failed unknown",
		"call system.metrics device " + dev + ": failed permission_denied",
		"call unknown device " + dev + ": failed not_found",
		"call devices.list device -: ok -",
		"call process.jobs device " + dev + ": ok -",
		"call process.jobs device -: failed not_found",
		"call unknown device -: failed not_found",
		"call process.jobs device " + dev + ": failed device_offline",
	}
	if strings.Join(calls, "\n") != strings.Join(wantCalls, "\n") {
		t.Errorf("logged calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(wantCalls, "\n"))
	}

	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.calls["process.jobs ok"] != 2 || obs.calls["unknown failed"] != 3 || obs.calls["process.jobs failed"] != 2 || obs.calls["devices.list ok"] != 1 {
		t.Errorf("counted calls: %v", obs.calls)
	}
	if obs.ends[transport.EndRemoteClose] != 1 {
		t.Errorf("link ends: %v", obs.ends)
	}
}

func TestAuditQueueIsBounded(t *testing.T) {
	h := newHarness(t, nil)
	a := h.srv.audit
	// A writer stuck in the database: nothing drains the queue.
	a.mu.Lock()
	a.writing, a.idle = true, make(chan struct{})
	a.mu.Unlock()
	e := store.AuditEntry{At: time.Now(), Tool: UnknownTool, Outcome: store.AuditOK}
	for range auditQueue + 3 {
		a.add(e)
	}
	if n := h.srv.AuditDropped(); n != 3 {
		t.Fatalf("dropped %d, want 3", n)
	}
	a.mu.Lock()
	a.writing = false
	close(a.idle)
	a.mu.Unlock()
}

// stallAudit makes the audit's writer look busy in the database, so
// nothing drains its queue until the returned function is called; the
// next call then starts a writer.
func stallAudit(a *auditLog) (release func()) {
	a.mu.Lock()
	a.writing, a.idle = true, make(chan struct{})
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		a.writing = false
		close(a.idle)
		a.mu.Unlock()
	}
}

// TestRefusalsWithoutTokenCannotCrowdOutCalls: while the audit's writer is
// held up, more requests with a bad client token than the audit's queue
// holds arrive from one address; the authenticated calls made meanwhile
// are all recorded, none dropped, the log holds no entry without a token,
// and the refusals are one count for the address and minute.
func TestRefusalsWithoutTokenCannotCrowdOutCalls(t *testing.T) {
	h := newHarness(t, nil)
	tok, bearer, err := h.st.CreateToken(store.TokenSpec{Name: "a", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h.link(t, auditDevice())
	s := h.session(t, "/mcp/dev", bearer)
	call := func() {
		t.Helper()
		if res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.jobs"}); err != nil || res.IsError {
			t.Fatalf("process.jobs: %v %+v", err, res)
		}
	}
	call()
	h.srv.audit.flush()

	release := stallAudit(h.srv.audit)
	const flood = auditQueue + 100
	client := &http.Client{}
	for i := range flood {
		req, _ := http.NewRequest("GET", h.hs.URL+"/mcp", nil)
		req.Header.Set("Authorization", fmt.Sprintf("Bearer cct_bogus_%d", i))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a bad token got %d", resp.StatusCode)
		}
	}
	for range 5 {
		call()
	}
	release()
	call()
	h.srv.audit.flush()

	if n := h.srv.AuditDropped(); n != 0 {
		t.Fatalf("%d audit entries dropped", n)
	}
	entries, err := h.st.Audit(limits.AuditMaxEntries)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 7 {
		t.Fatalf("%d audit entries, want the 7 calls", len(entries))
	}
	for _, e := range entries {
		if e.TokenID != tok.ID || e.Tool != "process.jobs" || e.Outcome != store.AuditOK {
			t.Fatalf("entry %+v", e)
		}
	}
	counts, err := h.st.RefusalCounts(limits.AuditMaxRefusalRows)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, c := range counts {
		if c.Source != "127.0.0.1" {
			t.Errorf("refusals counted for source %q", c.Source)
		}
		total += c.Count
	}
	// The flood may straddle a minute's end.
	if total != flood || len(counts) < 1 || len(counts) > 2 {
		t.Fatalf("refusal counts %+v, want %d in one or two minutes", counts, flood)
	}
}

// TestPendingRefusalSourcesAreBounded: however many sources are refused
// while the writer is held up, the relay holds at most
// limits.AuditPendingRefusalSources of them (and one for the rest), and
// counts every request.
func TestPendingRefusalSourcesAreBounded(t *testing.T) {
	h := newHarness(t, nil)
	a := h.srv.audit
	release := stallAudit(a)
	at := time.Now()
	const sources = limits.AuditPendingRefusalSources + 50
	for i := range sources {
		a.refuse(at, fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
		a.refuse(at, fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
	}
	a.mu.Lock()
	held, rest := len(a.refusals), a.refusals[refusalKey{minute: at.Truncate(time.Minute).UnixNano()}]
	var total int64
	for _, n := range a.refusals {
		total += n
	}
	a.mu.Unlock()
	release()
	if held != limits.AuditPendingRefusalSources+1 || rest != 2*50 || total != 2*sources {
		t.Fatalf("%d sources held, %d counted together, %d in all", held, rest, total)
	}
}

func TestEnrollRefusalsAreCounted(t *testing.T) {
	obs := newCountingObserver()
	h := newHarness(t, func(s *Server) { s.Observer = obs })
	post := func(body string) int {
		resp, err := http.Post(h.hs.URL+"/v1/enroll", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	post(`{"code":"ccE-AAAAAAAAAAAAAAAAAAAA","name":"x"}`)
	post(`not json`)
	code, err := h.st.CreateEnrollCode("", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if s := post(`{"code":"` + code + `","name":"ok-name"}`); s != http.StatusOK {
		t.Fatalf("enrollment: %d", s)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.refusals) != 2 || obs.refusals[RefusedCode] != 1 || obs.refusals[RefusedBadRequest] != 1 {
		t.Fatalf("refusals: %v", obs.refusals)
	}
}

func TestRefusalReasons(t *testing.T) {
	for status, want := range map[int]string{400: RefusedBadRequest, 401: RefusedCode, 403: RefusedCode, 413: RefusedTooLarge,
		429: RefusedRateLimited, 500: RefusedInternal, 503: RefusedInternal, 404: RefusedOther} {
		if got := refusalReason(status); got != want {
			t.Errorf("%d: %s, want %s", status, got, want)
		}
	}
}

// TestAuditOutlivesADatabaseOutage: a batch the database fails is tried
// again until it takes it; what it refuses as invalid is not, and one it
// keeps failing is given up after auditRetryFor.
func TestAuditOutlivesADatabaseOutage(t *testing.T) {
	tries := 0
	err := retried(func() error {
		if tries++; tries < 4 {
			return errcode.New(errcode.Internal, "relay state database error")
		}
		return nil
	})
	if err != nil || tries != 4 {
		t.Fatalf("a database back after 3 failures: %v after %d tries", err, tries)
	}
	tries = 0
	err = retried(func() error {
		tries++
		return errcode.New(errcode.InvalidArgument, "audit entry is not a content-free record")
	})
	if !errcode.Is(err, errcode.InvalidArgument) || tries != 1 {
		t.Fatalf("an invalid batch: %v after %d tries, want one", err, tries)
	}
}

// TestAuditNamesTheJob: a call about a job names it in its audit entry,
// from the process_id its arguments give or, for process.start, its
// result's, whichever path answered it; a process_id that is not a job's
// ID (a UUID in canonical form) and a call of another tool name none.
func TestAuditNamesTheJob(t *testing.T) {
	const job1, job2 = "5fa7e0b2-8c1d-4e3f-9a6b-0d2c4e6f8a1b", "0f8fad5b-d9cb-469f-a165-70867728950e"
	h := newHarness(t, nil)
	_, bearer, err := h.st.CreateToken(store.TokenSpec{Name: "a", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d := fakeDevice()
	schema := map[string]any{"type": "object"}
	for _, name := range []string{"process.start", "process.output", "process.status", "files.read"} {
		d.AddTool(&mcp.Tool{Name: name, InputSchema: schema}, func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if name == "process.start" {
				return toolresult.Success(map[string]any{"process_id": job1, "state": "running"}), nil
			}
			return toolresult.Success(map[string]any{"process_id": job2}), nil
		})
	}
	h.link(t, d)
	s := h.session(t, "/mcp/dev", bearer)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"process.start", map[string]any{"command": "true"}},
		{"process.output", map[string]any{"process_id": job2}},
		{"process.status", map[string]any{"process_id": "../../build-box/revoke?x="}},
		{"process.status", map[string]any{"process_id": strings.ToUpper(job2)}},
		{"files.read", map[string]any{"path": "x", "process_id": job2}},
	} {
		if _, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args}); err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
	}
	h.srv.audit.flush()
	entries, err := h.st.Audit(10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Tool+" "+e.Job)
	}
	// process.status's result names job2, but the call asked about no job.
	want := []string{"process.start " + job1, "process.output " + job2, "process.status " + job2, "process.status " + job2, "files.read "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("audited jobs %q, want %q", got, want)
	}

	// The SDK's path hands observe a decoded result.
	sdk := &mcp.CallToolResult{StructuredContent: map[string]any{"process_id": job1}}
	for _, c := range []struct {
		tool   string
		args   string
		result any
		want   string
	}{
		{"process.start", `{}`, sdk, job1},
		{"process.run", `{"command":"x"}`, []byte(`{"structuredContent":{"process_id":"` + job1 + `"}}`), job1},
		{"process.input", `{"process_id":"` + job2 + `"}`, sdk, job2},
		{"process.start", `{}`, &mcp.CallToolResult{StructuredContent: map[string]any{"process_id": "p-1"}}, ""},
		{"process.start", `{}`, []byte(`{"structuredContent":{"process_id":"p-1"}}`), ""},
		{"process.start", `{}`, []byte(`not json`), ""},
		{"process.status", `{"process_id":"` + job2 + `"`, nil, ""},
		{"files.write", `{"process_id":"` + job2 + `"}`, sdk, ""},
	} {
		if got := jobOf(c.tool, json.RawMessage(c.args), c.result); got != c.want {
			t.Errorf("jobOf(%s, %s, %v) = %q, want %q", c.tool, c.args, c.result, got, c.want)
		}
	}
}
