package relay

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// TestRevokedTokenRefusedAtOnce: once a revocation by another process
// (`relay token revoke` opens the same database) has returned, the very
// next request with that token is refused, on the relay's unchanged clock
// and in a session opened before, while a token that was not revoked
// keeps working from the relay's remembered check; an expiry is refused at
// once too.
func TestRevokedTokenRefusedAtOnce(t *testing.T) {
	var skew atomic.Int64
	h := newHarness(t, func(s *Server) { s.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) } })
	device := fakeDevice()
	device.AddTool(&mcp.Tool{Name: "process.jobs", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"jobs":[]}`}}}, nil
		})
	h.link(t, device)
	cli, err := store.Open(h.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })

	open := func(ttl time.Duration) (string, *mcp.ClientSession) {
		tok, secret, err := cli.CreateToken(store.TokenSpec{Name: "c", Devices: []string{"*"}, Tools: []string{"*"}, TTL: ttl}, h.srv.Now())
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

	_, kept := open(time.Hour)
	for i := range 20 {
		id, s := open(time.Hour)
		if refused(s) || refused(kept) {
			t.Fatalf("round %d: a valid token was refused", i)
		}
		if err := cli.RevokeToken(id, h.srv.Now()); err != nil {
			t.Fatal(err)
		}
		if !refused(s) {
			t.Fatalf("round %d: the request right after the revocation reached the device", i)
		}
		if refused(kept) {
			t.Fatalf("round %d: revoking another token refused this one", i)
		}
	}

	_, s := open(time.Minute)
	if refused(s) {
		t.Fatal("a valid token was refused")
	}
	skew.Add(int64(time.Minute))
	if !refused(s) {
		t.Fatal("an expired token still reaches the device")
	}
}

// countingState counts the token reads a tokenCache makes of its store,
// and can make the token-change counter unreadable.
type countingState struct {
	store.State
	reads       atomic.Int64
	counterDown atomic.Bool
}

func (s *countingState) AuthToken(bearer string, now time.Time) (*store.Token, error) {
	s.reads.Add(1)
	return s.State.AuthToken(bearer, now)
}

func (s *countingState) TokenChanges() (int64, error) {
	if s.counterDown.Load() {
		return 0, errToken
	}
	return s.State.TokenChanges()
}

// TestTokenCacheReadsTheTokenOnlyAfterAChange: repeated requests with one
// token read the token once; any token's revocation makes the next
// request read it again (and refuses the revoked one); a counter that
// cannot be read refuses even a remembered token.
func TestTokenCacheReadsTheTokenOnlyAfterAChange(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cs := &countingState{State: st}
	c := newTokenCache(cs)
	now := time.Now()
	spec := store.TokenSpec{Name: "c", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}
	_, bearer, err := st.CreateToken(spec, now)
	if err != nil {
		t.Fatal(err)
	}
	other, otherBearer, err := st.CreateToken(spec, now)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if _, err := c.auth(bearer, now); err != nil {
			t.Fatal(err)
		}
	}
	if n := cs.reads.Load(); n != 1 {
		t.Fatalf("100 requests read the token %d times, want 1", n)
	}
	if _, err := c.auth(otherBearer, now); err != nil {
		t.Fatal(err)
	}
	if err := st.RevokeToken(other.ID, now); err != nil {
		t.Fatal(err)
	}
	if _, err := c.auth(otherBearer, now); err == nil {
		t.Fatal("a revoked token was answered from the cache")
	}
	reads := cs.reads.Load()
	if _, err := c.auth(bearer, now); err != nil {
		t.Fatal(err)
	}
	if cs.reads.Load() != reads+1 {
		t.Fatal("a check from before a revocation was relied on")
	}
	cs.counterDown.Store(true)
	if _, err := c.auth(bearer, now); err == nil {
		t.Fatal("a remembered check was relied on without the counter")
	}
}
