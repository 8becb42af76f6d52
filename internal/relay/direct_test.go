package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/jsonspan"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/testkit"
	"github.com/commandcore/commandcore/internal/toolresult"
	"github.com/commandcore/commandcore/internal/transport"
)

// progressDevice serves process.run: three progress notifications whose
// messages need escaping, then a result with structured content.
func progressDevice(stops *atomic.Int64) *mcp.Server {
	d := fakeDevice()
	schema := map[string]any{"type": "object"}
	d.AddTool(&mcp.Tool{Name: "process.run", InputSchema: schema}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		for i, msg := range []string{"line \"one\"\n", "zwei – ü\t", "\u2028three\\"} {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i + 1), Message: msg}); err != nil {
				return nil, err
			}
		}
		return toolresult.Success(map[string]any{"exit_code": 0, "args": json.RawMessage(req.Params.Arguments)}), nil
	})
	d.AddTool(&mcp.Tool{Name: "process.jobs", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return toolresult.Success(map[string]any{"jobs": []any{}}), nil
	})
	d.AddTool(&mcp.Tool{Name: "process.stop", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		stops.Add(1)
		return toolresult.Success(map[string]any{}), nil
	})
	return d
}

// post sends one JSON-RPC body to the relay as an MCP client would and
// returns the HTTP status and the data of every event of the answer.
func post(t *testing.T, h *harness, path, bearer, protocol, tool, body string) (int, []map[string]any) {
	status, events, _ := postRaw(t, h, path, bearer, protocol, tool, body)
	return status, events
}

// postRaw is post, also returning the events' data as sent.
func postRaw(t *testing.T, h *harness, path, bearer, protocol, tool, body string) (int, []map[string]any, []string) {
	t.Helper()
	req, _ := http.NewRequest("POST", h.hs.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", protocol)
	if protocol >= statelessProtocol {
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", tool)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Logf("status %d: %s", resp.StatusCode, b)
		return resp.StatusCode, nil, nil
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	var events []map[string]any
	var raw []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			if sc.Text() != "" && sc.Text() != "event: message" {
				t.Fatalf("unexpected line %q", sc.Text())
			}
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		events = append(events, m)
		raw = append(raw, line)
	}
	return resp.StatusCode, events, raw
}

// meta is a call's _meta object: the progress token, if any, and the
// protocol triple of the stateless revisions.
func meta(protocol, token string) string {
	var ms []string
	if token != "" {
		ms = append(ms, `"progressToken":`+token)
	}
	if protocol >= statelessProtocol {
		ms = append(ms, `"io.modelcontextprotocol/protocolVersion":"`+protocol+`","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}`)
	}
	return "{" + strings.Join(ms, ",") + "}"
}

// callBody is a tools/call; extra, when not empty, is one more params
// member, which only the SDK's handler accepts.
func callBody(id, tool, protocol, token, extra string) string {
	if extra != "" {
		extra = "," + extra
	}
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + tool + `","arguments":{"command":"echo \"hi\" – ü"},"_meta":` + meta(protocol, token) + extra + `}}`
}

// TestDirectAnswerIsTheSDKsAnswer: a plain tools/call, which the relay
// forwards as bytes, gets the answer the SDK's handler gives the same call
// (sent with one more params member, which only the SDK accepts): the same
// progress notifications with the client's token, before the same result
// under the client's id, for an older protocol revision and the stateless
// one alike.
func TestDirectAnswerIsTheSDKsAnswer(t *testing.T) {
	h := newHarness(t, nil)
	var stops atomic.Int64
	h.linkVia(t, progressDevice(&stops), func(c *transport.Conn) mcp.Transport { return spacedConn{c} })
	_, bearer, err := h.st.CreateToken(store.TokenSpec{Name: "c", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, protocol := range []string{"2025-06-18", "2025-11-25", statelessProtocol} {
		for _, token := range []string{`7`, `"tok-a"`} {
			_, direct := post(t, h, "/mcp/dev", bearer, protocol, "process.run", callBody(`"id-1"`, "process.run", protocol, token, ""))
			_, viaSDK := post(t, h, "/mcp/dev", bearer, protocol, "process.run", callBody(`"id-1"`, "process.run", protocol, token, `"x-other":1`))
			if len(direct) != 4 {
				t.Fatalf("%s: %d events, want 3 progress and the result: %v", protocol, len(direct), direct)
			}
			var want any
			json.Unmarshal([]byte(token), &want)
			for i, e := range direct[:3] {
				params, _ := e["params"].(map[string]any)
				if e["method"] != "notifications/progress" || params["progressToken"] != want || params["progress"] != float64(i+1) {
					t.Fatalf("%s: event %d is %v", protocol, i, e)
				}
			}
			if direct[3]["id"] != "id-1" || direct[3]["result"] == nil {
				t.Fatalf("%s: the answer is %v", protocol, direct[3])
			}
			if !reflect.DeepEqual(direct, viaSDK) {
				t.Errorf("%s, token %s:\ndirect %v\nSDK    %v", protocol, token, direct, viaSDK)
			}
			if protocol >= statelessProtocol && direct[3]["result"].(map[string]any)["resultType"] != "complete" {
				t.Errorf("%s: the result has no resultType: %v", protocol, direct[3])
			}
		}
		// The direct answer is the device's bytes, which only a forwarder
		// that never re-encodes them keeps.
		body := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"process.jobs","_meta":` + meta(protocol, "") + `}}`
		_, _, raw := postRaw(t, h, "/mcp/dev", bearer, protocol, "process.jobs", body)
		if len(raw) != 1 || !strings.Contains(raw[0], `"result":{ `) {
			t.Errorf("%s: the result was re-encoded: %v", protocol, raw)
		}
	}
}

// spacedConn is a device's end of the link that writes every result with
// a space after its opening brace: the same JSON, in bytes only a
// verbatim forwarder keeps.
type spacedConn struct{ *transport.Conn }

func (c spacedConn) Connect(ctx context.Context) (mcp.Connection, error) {
	if _, err := c.Conn.Connect(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (c spacedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Response); ok && r.Result != nil {
		frame, err := jsonrpc.EncodeMessage(msg)
		if err != nil {
			return err
		}
		return c.Conn.WriteFrame(ctx, bytes.Replace(frame, []byte(`"result":{`), []byte(`"result":{ `), 1))
	}
	return c.Conn.Write(ctx, msg)
}

// TestDirectCallsAreCheckedAsTheSDKChecksThem: a call the relay's own
// reader would read otherwise than the device's decoder (a repeated or
// escaped key) or than the SDK does (an unknown tool, one outside the
// token's scope, a stale protocol header) never reaches the device as a
// different tool than the one the scope allowed.
func TestDirectCallsAreCheckedAsTheSDKChecksThem(t *testing.T) {
	h := newHarness(t, nil)
	var stops atomic.Int64
	h.link(t, progressDevice(&stops))
	_, bearer, err := h.st.CreateToken(store.TokenSpec{Name: "c", Devices: []string{"*"}, Tools: []string{"process.jobs"}, TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"process.jobs","name":"process.stop"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"process.jobs","n\u0061me":"process.stop"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"process.stop"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"process.st\u006fp"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/call","params":{"name":"process.stop"}}`,
	} {
		_, events := post(t, h, "/mcp/dev", bearer, "2025-11-25", "", body)
		for _, e := range events {
			if res, ok := e["result"].(map[string]any); ok && res["isError"] != true {
				t.Errorf("%s was answered %v", body, e)
			}
		}
	}
	if stops.Load() != 0 {
		t.Fatalf("process.stop ran %d times for a token that may only call process.jobs", stops.Load())
	}
	// The plain call of the scope's tool is answered.
	_, events := post(t, h, "/mcp/dev", bearer, "2025-11-25", "", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"process.jobs"}}`)
	if len(events) != 1 || events[0]["id"] != 2.0 || events[0]["result"].(map[string]any)["isError"] == true {
		t.Fatalf("process.jobs: %v", events)
	}
	// A protocol version the SDK does not know is refused as it refuses it.
	if status, _ := post(t, h, "/mcp/dev", bearer, "1999-01-01", "", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"process.jobs"}}`); status != http.StatusBadRequest {
		t.Fatalf("an unknown protocol version got %d", status)
	}
}

// FuzzReadDirect: whatever the body, readDirect takes only a tools/call
// that encoding/json reads the same way: the same id, tool and arguments.
func FuzzReadDirect(f *testing.F) {
	f.Add([]byte(callBody(`1`, "process.run", "2025-11-25", `"t"`, "")))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"process.jobs","arguments":{"a":[1,{"b":"\u00e9"}]}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"process.jobs","name":"process.stop"}}`))
	c := &client{token: &store.Token{Tools: []string{"*"}}}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _ := http.NewRequest("POST", "http://127.0.0.1/mcp/dev", nil)
		req.Host = "127.0.0.1"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "*/*")
		dc, ok := readDirect(req, body, c)
		if !ok {
			return
		}
		var m struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Method  string          `json:"method"`
			Params  struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"params"`
		}
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("took %q, which encoding/json refuses: %v", body, err)
		}
		if m.Method != "tools/call" || m.JSONRPC != "2.0" || m.Params.Name != dc.tool || string(m.ID) != string(dc.id) || string(m.Params.Arguments) != string(dc.args) {
			t.Fatalf("took %q as %+v; encoding/json reads %+v", body, dc, m)
		}
	})
}

// FuzzTake: whatever a device sends, the link's tap never panics, and what
// it hands a call is a valid JSON object (a result) or a JSON-RPC error.
func FuzzTake(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":"cc-1","result":{"content":[]}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"cc-1","progress":1,"message":"x"}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"cc-1","error":{"code":-32010,"message":"too large"}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"cc-1","result":7}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		var got [][]byte
		c := &linkCall{progress: func(p []byte) { got = append(got, p) }, answer: make(chan linkAnswer, 1)}
		l := &deviceLink{calls: map[string]*linkCall{"cc-1": c}}
		l.take(frame)
		for _, p := range got {
			if ms, err := jsonspan.Object(p); err != nil || !jsonspan.Valid(p) {
				t.Fatalf("progress %q from %q: %v %v", p, frame, ms, err)
			}
		}
		select {
		case a := <-c.answer:
			if a.err == nil && (!json.Valid(a.result) || a.result[0] != '{') {
				t.Fatalf("result %q from %q", a.result, frame)
			}
		default:
		}
	})
}

// TestStalledClientLosesOutputNotTheLink: a client that stops reading its
// answer while the device streams live output holds the device's link no
// longer than one write's bound: the device's call runs to its end, and
// the next client's call on the same link is answered.
func TestStalledClientLosesOutputNotTheLink(t *testing.T) {
	h := newHarness(t, func(s *Server) { s.Timeouts.Write = 300 * time.Millisecond })
	var finished atomic.Bool
	d := fakeDevice()
	d.AddTool(&mcp.Tool{Name: "process.run", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		chunk := strings.Repeat("x", 8<<10)
		for i := range 4096 { // 32 MiB: more than loopback's socket buffers hold
			if req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Message: chunk}) != nil {
				break
			}
		}
		finished.Store(true)
		return toolresult.Success(map[string]any{"output_capture": map[string]any{"transport_complete": true}}), nil
	})
	d.AddTool(&mcp.Tool{Name: "process.jobs", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return toolresult.Success(map[string]any{"jobs": []any{}}), nil
	})
	h.link(t, d)
	_, bearer, err := h.st.CreateToken(store.TokenSpec{Name: "c", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", h.hs.URL+"/mcp/dev", strings.NewReader(callBody("1", "process.run", "2025-11-25", `"p"`, "")))
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() // never read: the client has stalled
	testkit.Eventually(t, 30*time.Second, func() error {
		if !finished.Load() {
			return errors.New("the device's call is still held by a client that stopped reading")
		}
		return nil
	})
	_, events := post(t, h, "/mcp/dev", bearer, "2025-11-25", "", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"process.jobs"}}`)
	if len(events) != 1 || events[0]["id"] != 2.0 {
		t.Fatalf("the next call on the link: %v", events)
	}
}
