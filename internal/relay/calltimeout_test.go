package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSilentDeviceCallEndsAtTheBound simulates a device that never answers
// a call: the client gets device_timeout at the call timeout, the call is
// cancelled on the device, and the link keeps serving other calls.
func TestSilentDeviceCallEndsAtTheBound(t *testing.T) {
	h := newHarness(t, func(s *Server) { s.CallTimeout = 300 * time.Millisecond })
	cancelled := make(chan struct{})
	device := fakeDevice()
	device.AddTool(&mcp.Tool{Name: "process.status", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			close(cancelled)
			return nil, ctx.Err()
		})
	device.AddTool(&mcp.Tool{Name: "process.jobs", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"jobs":[]}`}}}, nil
		})
	h.link(t, device)
	session := h.connect(t, "/mcp/dev", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "process.status", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("the call did not end with a result: %v", err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if !res.IsError || !bytes.Contains(raw, []byte(`"code":"device_timeout"`)) {
		t.Fatalf("result: %s", raw)
	}
	select {
	case <-cancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("the call was not cancelled on the device")
	}
	if res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "process.jobs", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Fatalf("the next call: %v %+v", err, res)
	}
}

// TestForwardTimeoutOutlastsTheLongestCall pins the bound against the
// contract: process.run may run 10 min (its schema: timeout_ms 1-600000).
func TestForwardTimeoutOutlastsTheLongestCall(t *testing.T) {
	if d := (&Server{}).callTimeout(); d <= 10*time.Minute+3*time.Second {
		t.Fatalf("forwarded calls end after %s, before a 10 min process.run and its stop escalation", d)
	}
}
