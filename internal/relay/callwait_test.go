package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/toolresult"
)

// claude.ai ends a tool call after 300 s: the relay's default call wait is
// 240 s.
func TestCallWaitDefault(t *testing.T) {
	if limits.RelayCallWait != 240*time.Second {
		t.Fatalf("limits.RelayCallWait = %v; the contract says 240 s", limits.RelayCallWait)
	}
	if got := (&Server{}).callWait(); got != limits.RelayCallWait {
		t.Errorf("callWait without --max-call-wait: %v", got)
	}
}

func TestBoundWait(t *testing.T) {
	for _, tc := range []struct {
		name, tool, args string
		bound            time.Duration
		want             string
		cut              bool
		code             errcode.Code
	}{
		{"a default wait within", "process.wait", `{"process_ids":["a"]}`, 4 * time.Minute, `{"process_ids":["a"]}`, false, ""},
		{"ten minutes", "process.wait", `{"process_ids":["a"],"timeout_ms":600000,"mode":"all"}`, 4 * time.Minute, `{"process_ids":["a"],"timeout_ms":240000,"mode":"all"}`, true, ""},
		{"at the bound", "process.wait", `{"timeout_ms":240000}`, 4 * time.Minute, `{"timeout_ms":240000}`, false, ""},
		{"one past", "process.wait", `{"timeout_ms":240001}`, 4 * time.Minute, `{"timeout_ms":240000}`, true, ""},
		{"the default past a short bound", "process.wait", `{"process_ids":["a"]}`, 30 * time.Second, `{"process_ids":["a"],"timeout_ms":30000}`, true, ""},
		{"no arguments", "process.wait", ``, 30 * time.Second, `{"timeout_ms":30000}`, true, ""},
		{"null, the default", "process.wait", `{"timeout_ms":null}`, 30 * time.Second, `{"timeout_ms":30000}`, true, ""},
		{"wait_ms past a short bound", "process.output", `{"process_id":"a","wait_ms":20000}`, 10 * time.Second, `{"process_id":"a","wait_ms":10000}`, true, ""},
		{"wait_ms within", "process.start", `{"command":"x","wait_ms":30000}`, 4 * time.Minute, `{"command":"x","wait_ms":30000}`, false, ""},
		{"not a number", "process.wait", `{"timeout_ms":"long"}`, time.Second, `{"timeout_ms":"long"}`, false, ""},
		{"negative", "process.wait", `{"timeout_ms":-5}`, time.Second, `{"timeout_ms":-5}`, false, ""},
		{"a fraction", "process.wait", `{"timeout_ms":1e9}`, time.Second, `{"timeout_ms":1e9}`, false, ""},
		{"another tool", "files.read", `{"path":"/x","timeout_ms":9999999}`, time.Second, `{"path":"/x","timeout_ms":9999999}`, false, ""},
		{"a run within", "process.run", `{"command":"make"}`, 4 * time.Minute, `{"command":"make"}`, false, ""},
		{"a run too long", "process.run", `{"command":"make","timeout_ms":600000}`, 4 * time.Minute, "", false, errcode.InvalidArgument},
		{"an escaped key", "process.wait", `{"timeout\u005fms":600000}`, 4 * time.Minute, "", false, errcode.InvalidArgument},
		{"a repeated key", "process.wait", `{"timeout_ms":1,"timeout_ms":600000}`, 4 * time.Minute, "", false, errcode.InvalidArgument},
		{"not an object", "process.wait", `[1]`, 4 * time.Minute, "", false, errcode.InvalidArgument},
	} {
		s := &Server{MaxCallWait: tc.bound}
		got, cut, err := s.boundWait(tc.tool, json.RawMessage(tc.args))
		switch {
		case tc.code != "":
			if !errcode.Is(err, tc.code) {
				t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
			}
		case err != nil || string(got) != tc.want && !(tc.args == "" && string(got) == "{}") || cut != tc.cut:
			t.Errorf("%s: %s %v %v, want %s %v", tc.name, got, cut, err, tc.want, tc.cut)
		}
	}
	_, _, err := (&Server{}).boundWait("process.run", json.RawMessage(`{"command":"make","timeout_ms":600000}`))
	if e := errcode.From(err); !strings.Contains(e.Message, "at most 240000") || !strings.Contains(e.Message, "process.start") {
		t.Errorf("a run too long: %q names no bound or way out", e.Message)
	}
}

// A process.wait for ten minutes through a relay whose calls block at
// most a moment: the device is asked for that moment, the call returns
// then with what is true, and says to call again.
func TestAWaitThroughTheRelayIsCut(t *testing.T) {
	h := newHarness(t, func(s *Server) { s.MaxCallWait = 300 * time.Millisecond })
	var mu sync.Mutex
	var asked []float64
	d := fakeDevice()
	d.AddTool(&mcp.Tool{Name: "process.wait", InputSchema: map[string]any{"type": "object"}}, func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var a struct {
			TimeoutMS float64 `json:"timeout_ms"`
		}
		json.Unmarshal(r.Params.Arguments, &a)
		mu.Lock()
		asked = append(asked, a.TimeoutMS)
		mu.Unlock()
		time.Sleep(time.Duration(a.TimeoutMS) * time.Millisecond)
		return toolresult.Success(map[string]any{"ended": []any{}, "pending": []string{"job-1"}, "met": "timeout"}), nil
	})
	h.link(t, d)
	session := h.connect(t, "/mcp/dev", nil)
	start := time.Now()
	res, err := session.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.wait",
		Arguments: map[string]any{"process_ids": []string{"job-1"}, "timeout_ms": 600000}})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the call took %v", took)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 || asked[0] != 300 {
		t.Errorf("the device was asked to wait %v ms", asked)
	}
	sc, _ := res.StructuredContent.(map[string]any)
	last := res.Content[len(res.Content)-1].(*mcp.TextContent).Text
	if res.IsError || sc["call_again"] != true || sc["met"] != "timeout" || !strings.Contains(last, "call again to keep waiting") {
		t.Errorf("the cut wait's result: %+v %q", sc, last)
	}
	tools, err := session.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "process.wait" && !strings.Contains(tool.Description, "at most 300ms (timeout_ms above 300 is cut to it)") {
			t.Errorf("process.wait's description: %q", tool.Description)
		}
	}
}

// FuzzBoundWait: whatever a client sends, a process.wait the relay
// forwards is a JSON object whose timeout_ms, when a count, is within the
// call wait, and its other members are the client's.
func FuzzBoundWait(f *testing.F) {
	f.Add([]byte(`{"process_ids":["a"],"timeout_ms":600000}`))
	f.Add([]byte(`{"timeout_ms":1,"mode":"all"}`))
	f.Add([]byte(``))
	f.Add([]byte(`{"timeout_ms":"x"}`))
	s := &Server{MaxCallWait: 5 * time.Second}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, cut, err := s.boundWait("process.wait", data)
		if err != nil {
			return
		}
		var in, got map[string]any
		if json.Unmarshal(out, &got) != nil {
			t.Fatalf("%q forwarded as %q, not an object", data, out)
		}
		// A count the device takes is an integer literal (its decoder
		// refuses 1e9 or 5000.0 for timeout_ms).
		var ms struct {
			TimeoutMS json.Number `json:"timeout_ms"`
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		if dec.Decode(&ms) == nil {
			if n, err := strconv.ParseInt(ms.TimeoutMS.String(), 10, 64); err == nil && n > 5000 {
				t.Fatalf("%q forwarded with timeout_ms %d", data, n)
			}
		}
		if !cut {
			return
		}
		json.Unmarshal(data, &in)
		for k, v := range in {
			if k != "timeout_ms" && !reflect.DeepEqual(got[k], v) {
				t.Fatalf("%q: member %s became %v", data, k, got[k])
			}
		}
	})
}
