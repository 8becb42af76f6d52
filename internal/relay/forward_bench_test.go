package relay

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkForwardProgress measures the relay alone forwarding live output:
// a fake device answers one call with 256 progress notifications of 8 KiB
// (2 MiB), and a go-sdk client receives them through the relay, all in
// this process. Profile it with -cpuprofile to see where the relay spends.
func BenchmarkForwardProgress(b *testing.B) {
	h := newHarness(b, nil)
	const chunks, chunk = 256, 8 << 10
	text := strings.Repeat("a", chunk)
	device := fakeDevice()
	device.AddTool(&mcp.Tool{Name: "process.run", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			tok := req.Params.GetProgressToken()
			for i := range chunks {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i + 1), Message: text}); err != nil {
					return nil, err
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "{}"}}}, nil
		})
	h.link(b, device)
	got := make(chan int, chunks)
	session := h.connect(b, "/mcp/dev", &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { got <- len(r.Params.Message) },
	})
	b.SetBytes(chunks * chunk)
	b.ResetTimer()
	for range b.N {
		params := &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{}}
		params.SetProgressToken("t")
		res, err := session.CallTool(context.Background(), params)
		if err != nil || res.IsError {
			b.Fatalf("call: %v %+v", err, res)
		}
		for range chunks {
			if n := <-got; n != chunk {
				b.Fatalf("a notification carried %d bytes", n)
			}
		}
	}
}
