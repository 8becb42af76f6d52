package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/commandcore/commandcore/internal/testkit"
)

func TestHeartbeatsAnsweredAndVerified(t *testing.T) {
	cws, sws := tcpWS(t, nil)
	agent := Agent(cws, secret, Options{})
	server := Server(sws, secret, Options{HeartbeatInterval: time.Millisecond})
	testkit.Eventually(t, patience, func() error {
		if n := server.verified.Load(); n < 5 {
			return fmt.Errorf("verified %d heartbeats", n)
		}
		return nil
	})
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
	hb := heartbeatFrame(nonce)
	writeText(t, peer, string(hb))
	writeText(t, peer, `{"jsonrpc":"2.0","method":"notifications/commandcore/heartbeat_ack","params":{"nonce":"AAAA","mac":"x"}}`)
	nextIsAfter(t, peer, agent)

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

// heartbeat is a heartbeat as the agent reads it.
type heartbeat struct {
	Method string          `json:"method"`
	Params heartbeatParams `json:"params"`
}

// serverBeat starts a server end, has it send one heartbeat and returns
// it as the peer read it.
func serverBeat(t *testing.T) (*Conn, *websocket.Conn, *drained, heartbeat) {
	t.Helper()
	sws, peer := pipeWS(t)
	server := Server(sws, secret, noBeat)
	t.Cleanup(func() { server.Close() })
	got := drain(peer)
	server.beat()
	var hb heartbeat
	if err := json.Unmarshal(got.next(t), &hb); err != nil {
		t.Fatal(err)
	}
	return server, peer, got, hb
}

// TestServerVerifiesAck: a correct ack is verified and never reaches the
// MCP session; the heartbeat carries a 16-byte nonce.
func TestServerVerifiesAck(t *testing.T) {
	server, peer, got, hb := serverBeat(t)
	raw, err := nonceEncoding.DecodeString(hb.Params.Nonce)
	if hb.Method != MethodHeartbeat || err != nil || len(raw) != nonceBytes {
		t.Fatalf("heartbeat %+v", hb)
	}
	ack := heartbeatAckFrame(secret, hb.Params.Nonce)
	writeText(t, peer, string(ack))
	nextIsAfter(t, peer, server)
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
			b := heartbeatAckFrame(secret, n)
			return string(b)
		},
		"wrong mac": func(n string) string {
			b := heartbeatAckFrame(otherSecret, n)
			return string(b)
		},
		"undecodable mac": func(n string) string {
			return `{"jsonrpc":"2.0","method":"` + MethodHeartbeatAck + `","params":{"nonce":"` + n + `","mac":"!!"}}`
		},
	} {
		t.Run(name, func(t *testing.T) {
			server, peer, _, hb := serverBeat(t)
			writeText(t, peer, mk(hb.Params.Nonce))
			waitEnd(t, server, EndAuth)
		})
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
	ack := heartbeatAckFrame(secret, first)
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

// TestAlive: a live agent answers at once; a peer that never answers is
// not alive once the deadline passes, and neither is an ended link.
func TestAlive(t *testing.T) {
	cws, sws := tcpWS(t, nil)
	agent := Agent(cws, secret, Options{})
	defer agent.Close()
	server := Server(sws, secret, noBeat)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if !server.Alive(ctx) {
		t.Fatal("a live agent is not alive")
	}
	if agent.Alive(ctx) {
		t.Fatal("the agent end probed its server")
	}
	server.Close()
	if server.Alive(ctx) {
		t.Fatal("an ended link is alive")
	}

	sws, _ = pipeWS(t) // the peer never reads nor answers
	silent := Server(sws, secret, noBeat)
	defer silent.Close()
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if silent.Alive(short) {
		t.Fatal("a peer that never answers is alive")
	}
	if silent.End() != "" {
		t.Fatalf("a failed probe ended the link: %s", silent.End())
	}
}

// TestHeartbeatsEveryIntervalUntilTheEnd: the server end keeps sending
// heartbeats, one an interval, and none once the link has ended.
func TestHeartbeatsEveryIntervalUntilTheEnd(t *testing.T) {
	sws, peer := pipeWS(t)
	const every = 20 * time.Millisecond
	server := Server(sws, secret, Options{HeartbeatInterval: every})
	d := drain(peer)
	for beats := 0; beats < 3; {
		select {
		case b := <-d.msgs:
			if in, _ := classify(websocket.TextMessage, b); in.kind == frameHeartbeat {
				beats++
			}
		case <-time.After(patience):
			t.Fatalf("%d heartbeats came", beats)
		}
	}
	server.Close()
	server.pendMu.Lock()
	sent := len(server.pending)
	server.pendMu.Unlock()
	if sent >= maxPending {
		t.Fatalf("%d heartbeats unanswered already", sent)
	}
	time.Sleep(10 * every)
	server.pendMu.Lock()
	defer server.pendMu.Unlock()
	if len(server.pending) != sent {
		t.Fatalf("%d heartbeats sent after the end", len(server.pending)-sent)
	}
}
