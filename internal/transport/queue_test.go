package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

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
	hb := heartbeatFrame("AAAAAAAAAAAAAAAAAAAAAA")
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
