package transport

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var (
	secret      = []byte("device-secret-for-tests")
	otherSecret = []byte("some-other-secret")
)

// noBeat is a server option set without heartbeats and with the defaults
// otherwise (45 s silence, so only the behaviour under test can end a link).
var noBeat = Options{HeartbeatInterval: -1}

func notif(t *testing.T, method string) jsonrpc.Message {
	t.Helper()
	return &jsonrpc.Request{Method: method, Params: json.RawMessage(`{}`)}
}

// bigNotif is a notification whose encoding is about n bytes.
func bigNotif(n int) jsonrpc.Message {
	return &jsonrpc.Request{Method: "x/big", Params: json.RawMessage(`{"p":"` + strings.Repeat("a", n) + `"}`)}
}

type echoIn struct {
	Text string `json:"text"`
}

// TestMCPRoundTrip runs a real mcp.Server on the agent end and an
// mcp.Client on the server end over loopback TCP, with heartbeats running
// underneath, and checks a tools/call with progress notifications.
func TestMCPRoundTrip(t *testing.T) {
	cws, sws := tcpWS(t, nil)
	agent := Agent(cws, secret, Options{})
	server := Server(sws, secret, Options{HeartbeatInterval: time.Millisecond})

	srv := mcp.NewServer(&mcp.Implementation{Name: "agent", Version: "test"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "echo"},
		func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			tok := req.Params.GetProgressToken()
			for i := 1; i <= 3; i++ {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: tok, Progress: float64(i), Total: 3}); err != nil {
					return nil, nil, err
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	ss, err := srv.Connect(ctx, agent, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	defer ss.Close()

	progress := make(chan float64, 16)
	cl := mcp.NewClient(&mcp.Implementation{Name: "relay", Version: "test"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			progress <- r.Params.Progress
		},
	})
	cs, err := cl.Connect(ctx, server, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	// A large argument spans many WebSocket frames on the wire.
	text := strings.Repeat("z", 1<<20)
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}}
	params.SetProgressToken("tok")
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("result: %+v", res)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != text {
		t.Fatalf("result content mismatch")
	}
	seen := map[float64]bool{}
	for len(seen) < 3 {
		select {
		case p := <-progress:
			seen[p] = true
		case <-ctx.Done():
			t.Fatalf("progress seen %v", seen)
		}
	}
	if e := server.End(); e != "" {
		t.Fatalf("server ended: %s", e)
	}

	// The relay hangs up: a local shutdown there, a remote close here.
	if err := cs.Close(); err != nil {
		t.Logf("client close: %v", err)
	}
	waitEnd(t, server, EndLocalShutdown)
	waitEnd(t, agent, EndRemoteClose)
}

func TestSilence(t *testing.T) {
	quiet := Options{HeartbeatInterval: -1, SilenceTimeout: 20 * time.Millisecond, SendTimeout: 50 * time.Millisecond}
	t.Run("server", func(t *testing.T) {
		sws, _ := pipeWS(t) // the peer never writes (nor reads)
		c := Server(sws, secret, quiet)
		waitEnd(t, c, EndSilence)
		if _, err := c.Read(context.Background()); !errors.Is(err, io.EOF) {
			t.Fatalf("Read after end: %v", err)
		}
	})
	t.Run("agent", func(t *testing.T) {
		cws, _ := pipeWS(t)
		c := Agent(cws, secret, quiet)
		waitEnd(t, c, EndSilence)
	})
}

// TestPingAnswered: a WebSocket ping from the peer gets a pong.
func TestPingAnswered(t *testing.T) {
	cws, peer := pipeWS(t)
	c := Agent(cws, secret, Options{})
	defer c.Close()
	pong := make(chan string, 1)
	peer.SetPongHandler(func(s string) error { pong <- s; return nil })
	drain(peer)
	if err := peer.WriteControl(websocket.PingMessage, []byte("hi"), time.Now().Add(patience)); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-pong:
		if s != "hi" {
			t.Fatalf("pong %q", s)
		}
	case <-time.After(patience):
		t.Fatal("no pong")
	}
	if c.End() != "" {
		t.Fatalf("ended %s", c.End())
	}
}

func TestProtocolErrors(t *testing.T) {
	for name, send := range map[string]func(*websocket.Conn) error{
		"oversize": func(ws *websocket.Conn) error {
			return ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","method":"x","params":{"p":"`+strings.Repeat("a", 2048)+`"}}`))
		},
		"binary": func(ws *websocket.Conn) error {
			return ws.WriteMessage(websocket.BinaryMessage, []byte(`{"jsonrpc":"2.0","method":"x"}`))
		},
		"garbage": func(ws *websocket.Conn) error {
			return ws.WriteMessage(websocket.TextMessage, []byte("not json"))
		},
		"not jsonrpc": func(ws *websocket.Conn) error {
			return ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"1.0","method":"x"}`))
		},
		"heartbeat without nonce": func(ws *websocket.Conn) error {
			return ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","method":"`+MethodHeartbeat+`","params":{}}`))
		},
	} {
		t.Run(name, func(t *testing.T) {
			cws, peer := pipeWS(t)
			got := drain(peer)
			c := Agent(cws, secret, Options{MaxFrameBytes: 1024})
			if err := send(peer); err != nil {
				t.Fatal(err)
			}
			waitEnd(t, c, EndProtocol)
			if code := got.closeCode(t); code != websocket.CloseProtocolError && code != websocket.CloseMessageTooBig {
				t.Fatalf("close code %d", code)
			}
			if _, err := c.Read(context.Background()); !errors.Is(err, io.EOF) {
				t.Fatalf("Read after end: %v", err)
			}
		})
	}
}

func TestReadHonoursCtx(t *testing.T) {
	cws, peer := pipeWS(t)
	drain(peer)
	c := Agent(cws, secret, Options{})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Read(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read: %v", err)
	}
}
