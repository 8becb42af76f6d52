package transport

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
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

func TestHeartbeatsAnsweredAndVerified(t *testing.T) {
	cws, sws := tcpWS(t, nil)
	agent := Agent(cws, secret, Options{})
	server := Server(sws, secret, Options{HeartbeatInterval: time.Millisecond})
	deadline := time.Now().Add(patience)
	for server.verified.Load() < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("verified %d heartbeats", server.verified.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if agent.End() != "" || server.End() != "" {
		t.Fatalf("ended: agent %q server %q", agent.End(), server.End())
	}
	_ = server.Close()
	_ = agent.Close()
	if server.End() != EndLocalShutdown {
		t.Fatalf("server End %q", server.End())
	}
}

func TestWrongSecretIsAuthFailure(t *testing.T) {
	cws, sws := tcpWS(t, nil)
	agent := Agent(cws, otherSecret, Options{})
	server := Server(sws, secret, Options{HeartbeatInterval: time.Millisecond})
	waitEnd(t, server, EndAuth)
	// The server's close code tells the agent why.
	waitEnd(t, agent, EndAuth)
	if server.verified.Load() != 0 {
		t.Fatal("a wrong MAC was verified")
	}
}

// TestAgentAnswersHeartbeat: the agent acks with the right MAC and neither
// the heartbeat nor a stray ack reaches its MCP session.
func TestAgentAnswersHeartbeat(t *testing.T) {
	cws, peer := pipeWS(t)
	agent := Agent(cws, secret, Options{})
	defer agent.Close()
	got := drain(peer)

	nonce, err := newNonce()
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := heartbeatFrame(nonce)
	writeText(t, peer, string(hb))
	writeText(t, peer, `{"jsonrpc":"2.0","method":"notifications/commandcore/heartbeat_ack","params":{"nonce":"AAAA","mac":"x"}}`)
	writeText(t, peer, `{"jsonrpc":"2.0","method":"x/after"}`)

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	msg, err := agent.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if r, ok := msg.(*jsonrpc.Request); !ok || r.Method != "x/after" {
		t.Fatalf("read %T %+v, want x/after", msg, msg)
	}

	var ack struct {
		JSONRPC string             `json:"jsonrpc"`
		Method  string             `json:"method"`
		ID      any                `json:"id"`
		Params  heartbeatAckParams `json:"params"`
	}
	if err := json.Unmarshal(got.next(t), &ack); err != nil {
		t.Fatal(err)
	}
	if ack.JSONRPC != "2.0" || ack.Method != MethodHeartbeatAck || ack.ID != nil || ack.Params.Nonce != nonce {
		t.Fatalf("ack %+v", ack)
	}
	if ack.Params.MAC != MAC(secret, nonce) || !verifyMAC(secret, nonce, ack.Params.MAC) {
		t.Fatal("ack MAC does not verify")
	}
	if verifyMAC(otherSecret, nonce, ack.Params.MAC) {
		t.Fatal("MAC verifies under another secret")
	}
}

// TestServerVerifiesAck: a correct ack is verified and never reaches the
// MCP session; the heartbeat carries a 16-byte nonce.
func TestServerVerifiesAck(t *testing.T) {
	sws, peer := pipeWS(t)
	server := Server(sws, secret, noBeat)
	defer server.Close()
	got := drain(peer)
	server.beat()
	var hb struct {
		Method string          `json:"method"`
		Params heartbeatParams `json:"params"`
	}
	if err := json.Unmarshal(got.next(t), &hb); err != nil {
		t.Fatal(err)
	}
	raw, err := nonceEncoding.DecodeString(hb.Params.Nonce)
	if hb.Method != MethodHeartbeat || err != nil || len(raw) != nonceBytes {
		t.Fatalf("heartbeat %+v", hb)
	}
	ack, _ := heartbeatAckFrame(secret, hb.Params.Nonce)
	writeText(t, peer, string(ack))
	writeText(t, peer, `{"jsonrpc":"2.0","method":"x/after"}`)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	msg, err := server.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if r, ok := msg.(*jsonrpc.Request); !ok || r.Method != "x/after" {
		t.Fatalf("read %+v, want x/after", msg)
	}
	if server.verified.Load() != 1 {
		t.Fatalf("verified %d, want 1", server.verified.Load())
	}
	// Replaying the same ack is an ack for a nonce no longer pending.
	writeText(t, peer, string(ack))
	waitEnd(t, server, EndAuth)
	if code := got.closeCode(t); code != websocket.ClosePolicyViolation {
		t.Fatalf("close code %d", code)
	}
}

func TestServerRejectsBadAcks(t *testing.T) {
	for name, mk := range map[string]func(string) string{
		"unknown nonce": func(string) string {
			n, _ := newNonce()
			b, _ := heartbeatAckFrame(secret, n)
			return string(b)
		},
		"wrong mac": func(n string) string {
			b, _ := heartbeatAckFrame(otherSecret, n)
			return string(b)
		},
		"undecodable mac": func(n string) string {
			return `{"jsonrpc":"2.0","method":"` + MethodHeartbeatAck + `","params":{"nonce":"` + n + `","mac":"!!"}}`
		},
	} {
		t.Run(name, func(t *testing.T) {
			sws, peer := pipeWS(t)
			server := Server(sws, secret, noBeat)
			defer server.Close()
			got := drain(peer)
			server.beat()
			var hb struct {
				Params heartbeatParams `json:"params"`
			}
			if err := json.Unmarshal(got.next(t), &hb); err != nil {
				t.Fatal(err)
			}
			writeText(t, peer, mk(hb.Params.Nonce))
			waitEnd(t, server, EndAuth)
		})
	}
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

// TestSendTimeoutPipe: the peer never reads, so the first send stalls
// until SendTimeout; a Write blocked meanwhile returns ErrEnded.
func TestSendTimeoutPipe(t *testing.T) {
	cws, _ := pipeWS(t)
	c := Agent(cws, secret, Options{QueueFrames: 1, SendTimeout: 20 * time.Millisecond})
	errs := make(chan error, 1)
	go func() {
		var err error
		for err == nil {
			err = c.Write(context.Background(), notif(t, "x/y"))
		}
		errs <- err
	}()
	waitEnd(t, c, EndSendTimeout)
	select {
	case err := <-errs:
		if !errors.Is(err, ErrEnded) {
			t.Fatalf("Write: %v", err)
		}
	case <-time.After(patience):
		t.Fatal("Write still blocked after the link ended")
	}
}

// TestSendTimeoutTCP fills real TCP buffers with large frames towards a
// peer that never reads.
func TestSendTimeoutTCP(t *testing.T) {
	small := func(tc *net.TCPConn) { _ = tc.SetReadBuffer(4096); _ = tc.SetWriteBuffer(4096) }
	cws, _ := tcpWS(t, small)
	c := Agent(cws, secret, Options{SendTimeout: 50 * time.Millisecond})
	go func() {
		for c.Write(context.Background(), bigNotif(1<<20)) == nil {
		}
	}()
	waitEnd(t, c, EndSendTimeout)
}

// TestBackpressure: with the writer stalled, Write fills exactly
// QueueFrames frames and then blocks until its ctx is done; the link stays up.
func TestBackpressure(t *testing.T) {
	const q = 3
	cws, _ := pipeWS(t)
	c := Agent(cws, secret, Options{QueueFrames: q, SendTimeout: time.Hour})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	// One frame goes to the stalled writer, q fill the queue.
	for i := 0; i < q+1; i++ {
		if err := c.Write(ctx, notif(t, "x/y")); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	for len(c.out) != q { // the writer takes its frame eventually
		if ctx.Err() != nil {
			t.Fatalf("queue holds %d frames, want %d", len(c.out), q)
		}
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 3; i++ {
		short, stop := context.WithTimeout(context.Background(), 5*time.Millisecond)
		err := c.Write(short, notif(t, "x/y"))
		stop()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Write on a full queue: %v", err)
		}
	}
	if n := len(c.out); n != q {
		t.Fatalf("queue holds %d frames, want %d", n, q)
	}
	if c.End() != "" {
		t.Fatalf("ended %s", c.End())
	}
	// A cancelled ctx is honoured even without waiting.
	done, stop := context.WithCancel(context.Background())
	stop()
	if err := c.Write(done, notif(t, "x/y")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Write with cancelled ctx: %v", err)
	}
}

// TestHeartbeatBypassesFullQueue: with the MCP queue full, heartbeats
// still reach the peer.
func TestHeartbeatBypassesFullQueue(t *testing.T) {
	const q = 2
	sws, peer := pipeWS(t)
	c := Server(sws, secret, Options{QueueFrames: q, HeartbeatInterval: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	for i := 0; i < q+1; i++ {
		if err := c.Write(ctx, notif(t, "x/y")); err != nil {
			t.Fatal(err)
		}
	}
	for len(c.out) != q {
		if ctx.Err() != nil {
			t.Fatal("queue never filled")
		}
		time.Sleep(time.Millisecond)
	}
	hb, _ := heartbeatFrame("AAAAAAAAAAAAAAAAAAAAAA")
	c.ctrl <- hb
	got := drain(peer)
	// The writer's stalled frame comes first, then the heartbeat jumps the queue.
	if m := string(got.next(t)); !strings.Contains(m, "x/y") {
		t.Fatalf("first frame %q", m)
	}
	if m := string(got.next(t)); !strings.Contains(m, MethodHeartbeat) {
		t.Fatalf("second frame is not the heartbeat")
	}
}

func TestWriteTooLarge(t *testing.T) {
	cws, peer := pipeWS(t)
	drain(peer)
	c := Agent(cws, secret, Options{MaxFrameBytes: 1024})
	defer c.Close()
	if err := c.Write(context.Background(), bigNotif(2048)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Write: %v", err)
	}
	if c.End() != "" {
		t.Fatalf("ended %s", c.End())
	}
}

// TestResultTooLarge: a response too large for one frame reaches the peer
// as a JSON-RPC error with CodeResultTooLarge, and the link stays up.
func TestResultTooLarge(t *testing.T) {
	cws, peer := pipeWS(t)
	got := drain(peer)
	c := Agent(cws, secret, Options{MaxFrameBytes: 1024})
	defer c.Close()
	id, _ := jsonrpc.MakeID(float64(7))
	big := &jsonrpc.Response{ID: id, Result: json.RawMessage(`"` + strings.Repeat("a", 2048) + `"`)}
	if err := c.Write(context.Background(), big); err != nil {
		t.Fatalf("Write: %v", err)
	}
	msg, err := jsonrpc.DecodeMessage(got.next(t))
	if err != nil {
		t.Fatal(err)
	}
	resp, ok := msg.(*jsonrpc.Response)
	var werr *jsonrpc.Error
	if !ok || resp.ID != id || !errors.As(resp.Error, &werr) || werr.Code != CodeResultTooLarge {
		t.Fatalf("peer got %#v", msg)
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

func TestRemoteClose(t *testing.T) {
	t.Run("close frame", func(t *testing.T) {
		cws, peer := pipeWS(t)
		c := Agent(cws, secret, Options{})
		drain(peer)
		if err := peer.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), time.Now().Add(patience)); err != nil {
			t.Fatal(err)
		}
		waitEnd(t, c, EndRemoteClose)
	})
	t.Run("eof", func(t *testing.T) {
		cws, peer := tcpWS(t, nil)
		c := Server(cws, secret, noBeat)
		_ = peer.Close()
		waitEnd(t, c, EndRemoteClose)
	})
}

func TestLocalClose(t *testing.T) {
	cws, peer := pipeWS(t)
	got := drain(peer)
	c := Agent(cws, secret, Options{})
	tr, err := c.Connect(context.Background())
	if err != nil || tr != mcp.Connection(c) {
		t.Fatalf("Connect: %v", err)
	}
	if _, err := c.Connect(context.Background()); err == nil {
		t.Fatal("second Connect succeeded")
	}
	if c.SessionID() != "" {
		t.Fatal("SessionID not empty")
	}
	reading := make(chan error, 1)
	go func() {
		_, err := c.Read(context.Background())
		reading <- err
	}()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitEnd(t, c, EndLocalShutdown)
	select {
	case err := <-reading:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("Read: %v", err)
		}
	case <-time.After(patience):
		t.Fatal("Close did not unblock Read")
	}
	if code := got.closeCode(t); code != websocket.CloseNormalClosure {
		t.Fatalf("close code %d", code)
	}
	if err := c.Write(context.Background(), notif(t, "x/y")); !errors.Is(err, ErrEnded) {
		t.Fatalf("Write after Close: %v", err)
	}
	// Close again, concurrently: no panic, the first end stays.
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Close() }()
	}
	wg.Wait()
	if c.End() != EndLocalShutdown {
		t.Fatalf("End changed to %s", c.End())
	}
}

// TestFirstEndWins: after a silence end, a local Close does not rewrite it.
func TestFirstEndWins(t *testing.T) {
	cws, _ := pipeWS(t)
	c := Agent(cws, secret, Options{SilenceTimeout: 10 * time.Millisecond, SendTimeout: 50 * time.Millisecond})
	waitEnd(t, c, EndSilence)
	_ = c.Close()
	if c.End() != EndSilence {
		t.Fatalf("End = %s", c.End())
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

// TestPendingBound: unanswered heartbeats stop at maxPending and none of
// them is forgotten, so a late but correct ack still verifies.
func TestPendingBound(t *testing.T) {
	sws, peer := pipeWS(t)
	server := Server(sws, secret, noBeat)
	defer server.Close()
	drain(peer)
	first := ""
	deadline := time.Now().Add(patience)
	for {
		server.pendMu.Lock()
		n := len(server.pending)
		if n > 0 {
			first = server.pending[0]
		}
		server.pendMu.Unlock()
		if n == maxPending {
			break
		}
		if n > maxPending || time.Now().After(deadline) {
			t.Fatalf("pending %d", n)
		}
		server.beat()
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		server.beat()
	}
	server.pendMu.Lock()
	n := len(server.pending)
	server.pendMu.Unlock()
	if n != maxPending {
		t.Fatalf("pending %d, want %d", n, maxPending)
	}
	ack, _ := heartbeatAckFrame(secret, first)
	writeText(t, peer, string(ack))
	writeText(t, peer, `{"jsonrpc":"2.0","method":"x/after"}`)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if _, err := server.Read(ctx); err != nil {
		t.Fatalf("read: %v", err)
	}
	if server.verified.Load() != 1 || server.End() != "" {
		t.Fatalf("verified %d, end %q", server.verified.Load(), server.End())
	}
}
