package relay

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/testkit"
)

// replicaRouter simulates a relay replica that does not hold the device's
// link and routes calls to the one that does: here the first relay's own
// links. It counts what it carried.
type replicaRouter struct {
	holder       Router
	calls, notes atomic.Int64
	// unreachable: the replica that held the link is gone.
	unreachable atomic.Bool
}

func (r *replicaRouter) Call(ctx context.Context, deviceID string, call Call, progress func([]byte)) ([]byte, error) {
	r.calls.Add(1)
	if r.unreachable.Load() {
		return nil, ErrNoRoute
	}
	if call.Grant == "" {
		return nil, ErrNoRoute
	}
	return r.holder.Call(ctx, deviceID, call, func(p []byte) {
		r.notes.Add(1)
		progress(p)
	})
}

// callHere routes through the server's own links only.
type callHere struct{ s *Server }

func (c callHere) Call(ctx context.Context, deviceID string, call Call, progress func([]byte)) ([]byte, error) {
	return c.s.CallHere(ctx, deviceID, call, progress)
}

// TestCallsGoThroughTheRouter: with a Router set, a client's call, with its
// grant and its progress, reaches the device through it, and a device no
// router reaches is device_offline.
func TestCallsGoThroughTheRouter(t *testing.T) {
	r := &replicaRouter{}
	h := newHarness(t, func(s *Server) {
		r.holder = callHere{s}
		s.Router = r
	})
	device := fakeDevice()
	device.AddTool(&mcp.Tool{Name: "process.run", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			for i := range 3 {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i + 1), Message: "x"}); err != nil {
					return nil, err
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "{}"}}}, nil
		})
	h.link(t, device)
	var got atomic.Int64
	session := h.connect(t, "/mcp/dev", &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { got.Add(1) },
	})
	params := &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{}}
	params.SetProgressToken("p")
	res, err := session.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	// The client's SDK runs its progress handler on its own.
	testkit.Eventually(t, 5*time.Second, func() error {
		if got.Load() < 3 {
			return fmt.Errorf("the router carried %d calls and %d notifications; the client got %d", r.calls.Load(), r.notes.Load(), got.Load())
		}
		return nil
	})
	if r.calls.Load() != 1 || r.notes.Load() != 3 || got.Load() != 3 {
		t.Fatalf("the router carried %d calls and %d notifications; the client got %d", r.calls.Load(), r.notes.Load(), got.Load())
	}

	r.unreachable.Store(true)
	res, err = session.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "device_offline") {
		t.Fatalf("a call no router reaches: %v %+v", err, res)
	}
}
