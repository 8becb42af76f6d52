package relay

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/toolresult"
)

// TestUntilPathNeedsFilesList: a token without files.list gets
// permission_denied for process.wait with until.path, on a device's
// endpoint and on the all-devices one, and the device never sees the call;
// its other conditions, and a token with files.list, reach the device.
func TestUntilPathNeedsFilesList(t *testing.T) {
	h := newHarness(t, nil)
	var mu sync.Mutex
	var got []string
	dev := fakeDevice()
	dev.AddTool(&mcp.Tool{Name: waitTool, InputSchema: map[string]any{"type": "object"}}, func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		got = append(got, string(r.Params.Arguments))
		mu.Unlock()
		return toolresult.Success(map[string]any{"met": "timeout", "ended": []any{}, "pending": []any{"j"}}), nil
	})
	h.link(t, dev)
	token := func(tools ...string) string {
		_, bearer, err := h.st.CreateToken(store.TokenSpec{Name: "c", Devices: []string{"*"}, Tools: tools, TTL: time.Hour}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return bearer
	}
	without, with := token("process.*", "devices.list"), token("process.wait", "files.list", "devices.list")
	path := map[string]any{"process_ids": []string{"j"}, "until": map[string]any{"path": "/etc/shadow"}}
	port := map[string]any{"process_ids": []string{"j"}, "until": map[string]any{"port": 22}}
	for _, tc := range []struct {
		name, bearer, endpoint string
		args                   map[string]any
		denied                 bool
	}{
		{"until.path without files.list", without, "/mcp/dev", path, true},
		{"until.path without files.list, all devices", without, "/mcp", onDev(path), true},
		{"until.port without files.list", without, "/mcp/dev", port, false},
		{"until.path with files.list", with, "/mcp/dev", path, false},
		{"until.path with files.list, all devices", with, "/mcp", onDev(path), false},
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		res, err := h.session(t, tc.endpoint, tc.bearer).CallTool(context.Background(), &mcp.CallToolParams{Name: waitTool, Arguments: tc.args})
		_, failed := callResult(t, res, err)
		mu.Lock()
		reached := len(got)
		mu.Unlock()
		switch {
		case tc.denied && (!errcode.Is(failed, errcode.PermissionDenied) || reached != 0):
			t.Errorf("%s: %v, the device saw %d calls; want permission_denied and none", tc.name, failed, reached)
		case !tc.denied && (failed != nil || reached != 1):
			t.Errorf("%s: %v, the device saw %d calls; want it forwarded", tc.name, failed, reached)
		}
	}
}

func onDev(args map[string]any) map[string]any {
	out := map[string]any{"device": "dev"}
	for k, v := range args {
		out[k] = v
	}
	return out
}

func TestWaitsOnPath(t *testing.T) {
	for args, want := range map[string]bool{
		`{"process_ids":["j"],"until":{"path":"/x"}}`: true,
		`{"until":{"output":"x","path":"/x"}}`:        true,
		`{"until":{"PATH":"/x"}}`:                     true, // the device refuses it; the relay need not tell
		`{"until":{"path":""}}`:                       false,
		`{"until":{"path":null}}`:                     false,
		`{"until":{"port":80}}`:                       false,
		`{"until":"path"}`:                            false,
		`{"until":null}`:                              false,
		`{"process_ids":["j"]}`:                       false,
		`not json`:                                    false,
		``:                                            false,
		`{"process_ids":["j"],"until":{"path":"/x"},"until":{}}`: false, // the device refuses a repeated key
	} {
		if got := waitsOnPath(waitTool, json.RawMessage(args)); got != want {
			t.Errorf("%s: %v, want %v", args, got, want)
		}
	}
	if waitsOnPath("process.start", json.RawMessage(`{"until":{"path":"/x"}}`)) {
		t.Error("another tool's until")
	}
}
