package relay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/relaystate"
	"github.com/commandcore/commandcore/internal/relaytest"
)

// BenchmarkForwardProgress measures the relay alone forwarding live output:
// a fake device answers one call with 256 progress notifications of 8 KiB
// (2 MiB), and a go-sdk client receives them through the relay, all in
// this process. Profile it with -cpuprofile to see where the relay spends.
func BenchmarkForwardProgress(b *testing.B) {
	h := newHarness(b, nil)
	_, clientToken, err := h.st.CreateToken(relaystate.TokenSpec{Name: "bench", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
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
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { got <- len(r.Params.Message) },
	})
	session, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: h.hs.URL + "/mcp/dev", HTTPClient: relaytest.HTTPClient(clientToken),
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer session.Close()
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
