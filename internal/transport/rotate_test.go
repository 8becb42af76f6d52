package transport

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

const nextToken = "ccd_next-token-for-tests"

// TestRotationStoredBeforeAcknowledged: the server's Rotate returns only
// once the agent's Rotate stored the token, and the hand-over never reaches
// either MCP session.
func TestRotationStoredBeforeAcknowledged(t *testing.T) {
	cws, sws := tcpWS(t, nil)
	var stored atomic.Value
	agent := Agent(cws, secret, Options{Rotate: func(tok string) error {
		stored.Store(tok)
		return nil
	}})
	defer agent.Close()
	server := Server(sws, secret, noBeat)
	defer server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := server.Rotate(ctx, nextToken); err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if got, _ := stored.Load().(string); got != nextToken {
		t.Fatalf("the agent stored %q", got)
	}
	// One at a time, and another may follow once settled.
	if err := server.Rotate(ctx, nextToken+"2"); err != nil {
		t.Fatalf("a second rotation: %v", err)
	}
	if err := agent.Rotate(ctx, nextToken); err == nil {
		t.Fatal("the agent end handed out a token")
	}
	if err := server.Rotate(ctx, "has space"); err == nil {
		t.Fatal("a malformed token was handed out")
	}
	if agent.End() != "" || server.End() != "" {
		t.Fatalf("ended: agent %q server %q", agent.End(), server.End())
	}
}

// TestRotationNotStoredIsNotAcknowledged: an agent that cannot store the
// token (or does not rotate at all) never acknowledges it, and the link
// stays up.
func TestRotationNotStoredIsNotAcknowledged(t *testing.T) {
	for name, rotate := range map[string]func(string) error{
		"store fails": func(string) error { return errors.New("disk full") },
		"no rotation": nil,
	} {
		t.Run(name, func(t *testing.T) {
			cws, sws := tcpWS(t, nil)
			agent := Agent(cws, secret, Options{Rotate: rotate})
			defer agent.Close()
			server := Server(sws, secret, Options{HeartbeatInterval: time.Millisecond})
			defer server.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if err := server.Rotate(ctx, nextToken); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Rotate: %v", err)
			}
			if err := server.Rotate(context.Background(), nextToken); err == nil {
				t.Fatal("a second rotation started while one is unanswered")
			}
			// Heartbeats still flow.
			for n := server.verified.Load(); server.verified.Load() < n+3; time.Sleep(time.Millisecond) {
				if server.End() != "" {
					t.Fatalf("the link ended: %s", server.End())
				}
			}
		})
	}
}

// TestRotationFramesStayOnTheLink: the agent answers a rotation with the
// MAC over the token and hands neither to its MCP session.
func TestRotationFramesStayOnTheLink(t *testing.T) {
	cws, peer := pipeWS(t)
	agent := Agent(cws, secret, Options{Rotate: func(string) error { return nil }})
	defer agent.Close()
	got := drain(peer)
	rot, _ := rotateFrame(nextToken)
	writeText(t, peer, string(rot))
	nextIsAfter(t, peer, agent)
	var ack struct {
		Method string          `json:"method"`
		ID     any             `json:"id"`
		Params rotateAckParams `json:"params"`
	}
	if err := json.Unmarshal(got.next(t), &ack); err != nil {
		t.Fatal(err)
	}
	if ack.Method != MethodRotateAck || ack.ID != nil || !verifyRotateMAC(secret, nextToken, ack.Params.MAC) {
		t.Fatalf("ack %+v", ack)
	}
	if verifyRotateMAC(otherSecret, nextToken, ack.Params.MAC) || verifyRotateMAC(secret, nextToken+"x", ack.Params.MAC) {
		t.Fatal("the ack verifies for another secret or token")
	}
	// A rotation MAC is never a heartbeat MAC.
	if ack.Params.MAC == MAC(secret, nonceEncoding.EncodeToString([]byte(nextToken))) {
		t.Fatal("rotation and heartbeat MACs coincide")
	}
}

// TestServerRejectsBadRotationAcks: an ack without a rotation under way,
// or for another token or secret, ends the link as an authentication
// failure.
func TestServerRejectsBadRotationAcks(t *testing.T) {
	for name, c := range map[string]struct {
		rotate bool
		ack    func() []byte
	}{
		"unsolicited":  {false, func() []byte { b, _ := rotateAckFrame(secret, nextToken); return b }},
		"other token":  {true, func() []byte { b, _ := rotateAckFrame(secret, nextToken+"x"); return b }},
		"other secret": {true, func() []byte { b, _ := rotateAckFrame(otherSecret, nextToken); return b }},
	} {
		t.Run(name, func(t *testing.T) {
			sws, peer := pipeWS(t)
			server := Server(sws, secret, noBeat)
			defer server.Close()
			got := drain(peer)
			res := make(chan error, 1)
			if c.rotate {
				go func() { res <- server.Rotate(context.Background(), nextToken) }()
				if !strings.Contains(string(got.next(t)), MethodRotate) {
					t.Fatal("no rotation sent")
				}
			}
			writeText(t, peer, string(c.ack()))
			waitEnd(t, server, EndAuth)
			if code := got.closeCode(t); code != websocket.ClosePolicyViolation {
				t.Fatalf("close code %d", code)
			}
			if c.rotate {
				if err := <-res; !errors.Is(err, ErrEnded) {
					t.Fatalf("Rotate on a link that ended: %v", err)
				}
			}
		})
	}
}

func TestValidToken(t *testing.T) {
	for tok, ok := range map[string]bool{
		"ccd_" + strings.Repeat("A", 43): true, "x": true, strings.Repeat("a", maxTokenBytes): true,
		"": false, strings.Repeat("a", maxTokenBytes+1): false, "a b": false, "a\r\n": false, "é": false, "a\x7f": false,
	} {
		if ValidToken(tok) != ok {
			t.Errorf("ValidToken(%q) = %v", tok, !ok)
		}
	}
}

// FuzzDecodeRotate: whatever the params, a rotation decodes to a token
// that fits a bearer header and survives the round trip, and an ack to a
// MAC that can be checked.
func FuzzDecodeRotate(f *testing.F) {
	for _, s := range []string{
		`{"token":"` + nextToken + `"}`, `{"token":"a","v":2}`, `{"token":""}`, `{"token":"a b"}`,
		`{"token":"` + strings.Repeat("a", maxTokenBytes+1) + `"}`, `{"token":"\u0000"}`, `{"token":7}`,
		`{"mac":"` + rotateMAC(secret, nextToken) + `"}`, `{"mac":"!!"}`, `{"mac":""}`,
		"null", "[]", "{", "", `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		if tok, ok := decodeRotate(params); ok {
			if !ValidToken(tok) || strings.ContainsAny(tok, "\r\n ") {
				t.Fatalf("decoded an unusable token (len %d)", len(tok))
			}
			frame, err := rotateFrame(tok)
			if err != nil {
				t.Fatal(err)
			}
			in, end := classify(websocket.TextMessage, frame)
			if end != "" || in.kind != frameRotate || in.token != tok {
				t.Fatal("a decoded token does not round-trip")
			}
		} else if tok != "" {
			t.Fatal("a refused rotation carries a token")
		}
		if mac, ok := decodeRotateAck(params); ok {
			if !validNonce(mac) {
				t.Fatal("decoded an undecodable MAC")
			}
			_ = verifyRotateMAC(secret, nextToken, mac)
		} else if mac != "" {
			t.Fatal("a refused ack carries a MAC")
		}
	})
}
