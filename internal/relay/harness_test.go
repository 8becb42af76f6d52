package relay

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/testkit"
	"github.com/commandcore/commandcore/internal/transport"
)

// harness is an in-process relay with one enrolled device, "dev".
type harness struct {
	stateDir string
	st       *store.Store
	srv      *Server
	hs       *httptest.Server
	dev      *store.Device
	token    string // as enrolled
	secret   []byte

	mu      sync.Mutex
	rotated string // the token link's agent took last
}

// current is the device's current token.
func (h *harness) current() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rotated != "" {
		return h.rotated
	}
	return h.token
}

func newHarness(tb testing.TB, tune func(*Server)) *harness {
	tb.Helper()
	dir := tb.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	h := newHarnessOn(tb, st, tune)
	h.stateDir = dir
	return h
}

// newHarnessOn is newHarness over st (a PostgreSQL database's, say).
func newHarnessOn(tb testing.TB, st *store.Store, tune func(*Server)) *harness {
	tb.Helper()
	srv, err := New(st)
	if err != nil {
		tb.Fatal(err)
	}
	if tune != nil {
		tune(srv)
	}
	// The HTTP server `relay serve` runs, on loopback.
	hs := httptest.NewUnstartedServer(nil)
	hs.Config = srv.HTTPServer()
	hs.Start()
	tb.Cleanup(func() { srv.Close(); hs.Close() })
	code, err := st.CreateEnrollCode("dev", time.Minute, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	dev, token, secret, err := st.Enroll(code, "", time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return &harness{st: st, srv: srv, hs: hs, dev: dev, token: token, secret: secret}
}

// link connects a fake device serving device's tools with the current
// token, and waits until the relay has registered it and made the token it
// handed over current.
func (h *harness) link(tb testing.TB, device *mcp.Server) *transport.Conn {
	tb.Helper()
	return h.linkVia(tb, device, func(c *transport.Conn) mcp.Transport { return c })
}

// linkVia is link, with the device serving over via(its end of the link).
func (h *harness) linkVia(tb testing.TB, device *mcp.Server, via func(*transport.Conn) mcp.Transport) *transport.Conn {
	tb.Helper()
	ws, err := transport.Dial(context.Background(), h.hs.URL, h.current())
	if err != nil {
		tb.Fatal(err)
	}
	var next atomic.Value
	conn := transport.Agent(ws, h.secret, transport.Options{Rotate: func(tok string) error { next.Store(tok); return nil }})
	tb.Cleanup(func() { conn.Close() })
	if _, err := device.Connect(context.Background(), via(conn), nil); err != nil {
		tb.Fatal(err)
	}
	testkit.Eventually(tb, 20*time.Second, func() error {
		tok, _ := next.Load().(string)
		if l := h.srv.connected(h.dev.ID); l == nil || l.conn == nil || tok == "" {
			return fmt.Errorf("the fake device never linked (link %v, rotated token stored %v)", l != nil && l.conn != nil, tok != "")
		}
		if _, _, err := h.st.AuthDevice(tok, time.Now()); err != nil {
			return fmt.Errorf("the fake device never linked: its rotated token: %v", err)
		}
		h.mu.Lock()
		h.rotated = tok
		h.mu.Unlock()
		return nil
	})
	return conn
}

// connect opens an MCP session to the relay's endpoint path with a new
// client token for every device and tool; opts may be nil.
func (h *harness) connect(tb testing.TB, path string, opts *mcp.ClientOptions) *mcp.ClientSession {
	tb.Helper()
	_, token, err := h.st.CreateToken(store.TokenSpec{Name: "client", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	session, err := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "1"}, opts).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: h.hs.URL + path, HTTPClient: relaytest.HTTPClient(token)}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { session.Close() })
	return session
}

func fakeDevice() *mcp.Server {
	return mcp.NewServer(&mcp.Implementation{Name: "fake-device", Version: "1"}, nil)
}
