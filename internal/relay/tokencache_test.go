package relay

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/relaystate"
	"github.com/commandcore/commandcore/internal/relaytest"
)

// TestRevokedTokenStopsWithinTheRecheck: a client token revoked in the
// store (as `relay token revoke`, another process, does) no longer reaches
// the device once 1 s has passed on the relay's clock, even in a session
// it opened before; a token that expires is refused at once.
func TestRevokedTokenStopsWithinTheRecheck(t *testing.T) {
	var skew atomic.Int64
	h := newHarness(t, func(s *Server) { s.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) } })
	device := fakeDevice()
	device.AddTool(&mcp.Tool{Name: "process.jobs", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"jobs":[]}`}}}, nil
		})
	h.link(t, device)

	open := func(ttl time.Duration) (string, *mcp.ClientSession) {
		tok, secret, err := h.st.CreateToken(relaystate.TokenSpec{Name: "c", Devices: []string{"*"}, Tools: []string{"*"}, TTL: ttl}, h.srv.Now())
		if err != nil {
			t.Fatal(err)
		}
		s, err := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: h.hs.URL + "/mcp/dev", HTTPClient: relaytest.HTTPClient(secret)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return tok.ID, s
	}
	refused := func(s *mcp.ClientSession) bool {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.jobs"})
		if err == nil && res.IsError {
			t.Fatalf("a call answered %+v", res.Content)
		}
		return err != nil && strings.Contains(err.Error(), "Unauthorized")
	}

	id, s := open(time.Hour)
	if refused(s) {
		t.Fatal("a valid token was refused")
	}
	if err := h.st.RevokeToken(id, h.srv.Now()); err != nil {
		t.Fatal(err)
	}
	skew.Add(int64(time.Second))
	if !refused(s) {
		t.Fatal("a token revoked 1 s ago still reaches the device")
	}

	_, s = open(time.Minute)
	if refused(s) {
		t.Fatal("a valid token was refused")
	}
	skew.Add(int64(time.Minute))
	if !refused(s) {
		t.Fatal("an expired token still reaches the device")
	}
}
