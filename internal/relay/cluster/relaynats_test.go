package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/natstest"
	"github.com/commandcore/commandcore/internal/relay"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/testkit"
	"github.com/commandcore/commandcore/internal/transport"
)

// replica is one relay replica of a cluster on one state, joined through
// NATS, serving HTTP on loopback.
type replica struct {
	srv *relay.Server
	hs  *httptest.Server
}

type cluster struct {
	st       *store.Store
	replicas []replica
	dev      *store.Device
	secret   []byte
	token    string
	natsURL  string
}

func newCluster(tb testing.TB, n int) *cluster {
	tb.Helper()
	ns := natstest.Start(tb)
	st, err := store.Open(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	c := &cluster{st: st, natsURL: ns.ClientURL()}
	for i := range n {
		nc, err := Connect(Options{URL: ns.ClientURL()}, fmt.Sprint(i))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(nc.Close)
		key, err := st.ClusterKey()
		if err != nil {
			tb.Fatal(err)
		}
		peers, err := New(nc, key)
		if err != nil {
			tb.Fatal(err)
		}
		srv, err := relay.NewReplica(st, relay.ReplicaConfig{Name: fmt.Sprintf("r%d", i), Peers: peers})
		if err != nil {
			tb.Fatal(err)
		}
		hs := httptest.NewUnstartedServer(nil)
		hs.Config = srv.HTTPServer()
		hs.Start()
		tb.Cleanup(func() { srv.Close(); hs.Close() })
		c.replicas = append(c.replicas, replica{srv: srv, hs: hs})
	}
	code, err := st.CreateEnrollCode("dev", time.Minute, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	if c.dev, c.token, c.secret, err = st.Enroll(code, "", time.Now()); err != nil {
		tb.Fatal(err)
	}
	return c
}

// link connects a fake device serving device's tools to replica i and
// waits until the state records that replica as the link's holder.
func (c *cluster) link(tb testing.TB, i int, device *mcp.Server) *transport.Conn {
	tb.Helper()
	ws, err := transport.Dial(context.Background(), c.replicas[i].hs.URL, c.token)
	if err != nil {
		tb.Fatal(err)
	}
	var next atomic.Value
	conn := transport.Agent(ws, c.secret, transport.Options{Rotate: func(tok string) error { next.Store(tok); return nil }})
	tb.Cleanup(func() { conn.Close() })
	if _, err := device.Connect(context.Background(), conn, nil); err != nil {
		tb.Fatal(err)
	}
	testkit.Eventually(tb, 20*time.Second, func() error {
		tok, _ := next.Load().(string)
		holder, err := c.st.LinkHolder(c.dev.ID, time.Now())
		if err != nil || holder != c.replicas[i].srv.ReplicaID() || tok == "" {
			return fmt.Errorf("the device never linked to replica %d (holder %q, %v, rotated %v)", i, holder, err, tok != "")
		}
		if _, _, err := c.st.AuthDevice(tok, time.Now()); err != nil {
			return fmt.Errorf("the rotated token: %v", err)
		}
		c.token = tok
		return nil
	})
	return conn
}

// connect opens an MCP session to replica i's endpoint path.
func (c *cluster) connect(tb testing.TB, i int, path string, opts *mcp.ClientOptions) *mcp.ClientSession {
	tb.Helper()
	_, token, err := c.st.CreateToken(store.TokenSpec{Name: "client", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	s, err := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "1"}, opts).Connect(context.Background(),
		testkit.Relayed(c.replicas[i].hs.URL+path, token), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// echoDevice answers process.run with its arguments as the text, after
// n progress notifications; process.wait waits for its cancellation.
func echoDevice(n int, cancelled chan<- struct{}) *mcp.Server {
	d := mcp.NewServer(&mcp.Implementation{Name: "device", Version: "1"}, nil)
	d.AddTool(&mcp.Tool{Name: "process.run", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			for i := range n {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(),
					Progress: float64(i + 1), Message: fmt.Sprintf("chunk %d", i)}); err != nil {
					return nil, err
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
		})
	d.AddTool(&mcp.Tool{Name: "process.wait", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			close(cancelled)
			return nil, ctx.Err()
		})
	return d
}

// TestACallCrossesToTheReplicaHoldingTheLink: a client of replica 1
// calls a device linked to replica 0; the arguments arrive as written,
// the progress in order before the result, and the result as the device
// encoded it, here a result larger than one NATS message.
func TestACallCrossesToTheReplicaHoldingTheLink(t *testing.T) {
	c := newCluster(t, 2)
	c.link(t, 0, echoDevice(50, nil))
	var mu sync.Mutex
	var seen []string
	s := c.connect(t, 1, "/mcp/dev", &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			seen = append(seen, r.Params.Message)
			mu.Unlock()
		},
	})
	big := strings.Repeat("x", 3<<20)
	params := &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{"command": big, "b": 1}}
	params.SetProgressToken("p")
	res, err := s.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("call through replica 1: %v %+v", err, res)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &args); err != nil || args["command"] != big || args["b"] != float64(1) {
		t.Fatalf("the device saw other arguments (%d bytes of text, %v)", len(res.Content[0].(*mcp.TextContent).Text), err)
	}
	if sent, _ := c.replicas[1].srv.CrossReplicaCalls(); sent != 1 {
		t.Errorf("replica 1 counts %d calls sent to another replica, want 1", sent)
	}
	if _, served := c.replicas[0].srv.CrossReplicaCalls(); served != 1 {
		t.Errorf("replica 0 counts %d calls served for another replica, want 1", served)
	}
	if links := c.replicas[1].srv.ReplicaLinks(); links["r0"] != 1 || links["r1"] != 0 {
		t.Errorf("links by replica as replica 1 sees them: %v", links)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 50 {
		t.Fatalf("%d progress notifications before the result, want 50", len(seen))
	}
	for i, m := range seen {
		if m != fmt.Sprintf("chunk %d", i) {
			t.Fatalf("progress %d is %q: out of order", i, m)
		}
	}
}

// TestACancelledCallIsCancelledOnTheDevice: a client of replica 1 gives
// up on a call to a device linked to replica 0; the call ends on the
// device.
func TestACancelledCallIsCancelledOnTheDevice(t *testing.T) {
	c := newCluster(t, 2)
	cancelled := make(chan struct{})
	c.link(t, 0, echoDevice(0, cancelled))
	s := c.connect(t, 1, "/mcp/dev", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "process.wait", Arguments: map[string]any{}}); err == nil {
		t.Fatal("a call that cannot end ended")
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the device never saw the cancellation")
	}
}

// TestOneLinkInTheCluster: the device, linked to replica 0, links again
// through replica 1 while its first link answers: device_busy. Once the
// first replica is gone, replica 1 takes it, and replica 2, which called
// through replica 0 before, reaches it through replica 1.
func TestOneLinkInTheCluster(t *testing.T) {
	c := newCluster(t, 3)
	c.link(t, 0, echoDevice(0, nil))
	far := c.connect(t, 2, "/mcp/dev", nil)
	call := func(s *mcp.ClientSession, when string) {
		t.Helper()
		if res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{}}); err != nil || res.IsError {
			t.Fatalf("a call %s: %v %+v", when, err, res)
		}
	}
	call(far, "through replica 2 to replica 0")
	if _, err := transport.Dial(context.Background(), c.replicas[1].hs.URL, c.token); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("a second link through another replica: %v, want 409 device_busy", err)
	}
	c.replicas[0].srv.Close()
	c.replicas[0].hs.Close()
	c.link(t, 1, echoDevice(0, nil))
	call(c.connect(t, 1, "/mcp/dev", nil), "after the takeover, at the new holder")
	call(far, "after the takeover, through replica 2, which last reached replica 0")
}
