package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/natstest"
	"github.com/commandcore/commandcore/internal/relay"
)

// here is a replica's own side as a test sets it: what its links answer.
type here struct {
	mu        sync.Mutex
	calls     []relay.Call
	deadlines []time.Time
	alive     bool
}

func (h *here) CallHere(ctx context.Context, _ string, call relay.Call, _ func([]byte)) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call)
	d, _ := ctx.Deadline()
	h.deadlines = append(h.deadlines, d)
	return []byte(`{"content":[]}`), nil
}

func (h *here) LinkAnswersHere(context.Context, string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.alive
}

// testKey is a cluster key for tests.
var testKey = bytes.Repeat([]byte{7}, 32)

// newPeers joins the NATS server at url with key.
func newPeers(t *testing.T, url string, key []byte) *Peers {
	t.Helper()
	nc, err := Connect(Options{URL: url}, "p")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	p, err := New(nc, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// twoPeers is replica r1 served through one NATS connection and a peer
// that calls it through another, on a real NATS server.
func twoPeers(t *testing.T) (*here, *Peers) {
	t.Helper()
	h, _, caller, _ := twoPeersOn(t)
	return h, caller
}

// twoPeersOn is twoPeers with the serving peer and the server's URL too.
func twoPeersOn(t *testing.T) (h *here, server, caller *Peers, url string) {
	t.Helper()
	ns := natstest.Start(t)
	h = &here{}
	server = newPeers(t, ns.ClientURL(), testKey)
	if err := server.Serve("r1", h); err != nil {
		t.Fatal(err)
	}
	return h, server, newPeers(t, ns.ClientURL(), testKey), ns.ClientURL()
}

// TestArgumentsArriveAsSent: no arguments arrive as none, an empty object
// as itself, and arguments larger than one message whole, in order; the
// caller's deadline comes with them.
func TestArgumentsArriveAsSent(t *testing.T) {
	h, p := twoPeers(t)
	big := `{"data":"` + strings.Repeat("0123456789", 3*p.partBytes()/10+7) + `"}`
	for _, args := range []json.RawMessage{nil, json.RawMessage(`{}`), json.RawMessage(big)} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sent, _ := ctx.Deadline()
		res, err := p.Call(ctx, "r1", "dev", relay.Call{Tool: "process.jobs", Arguments: args, Grant: "g"}, nil)
		cancel()
		if err != nil || string(res) != `{"content":[]}` {
			t.Fatalf("call with %d bytes of arguments: %s, %v", len(args), res, err)
		}
		h.mu.Lock()
		got, deadline := h.calls[len(h.calls)-1], h.deadlines[len(h.deadlines)-1]
		h.mu.Unlock()
		if d := deadline.Sub(sent); d > time.Second || d < -time.Second {
			t.Errorf("the holder's deadline is %v from the caller's", d)
		}
		if (args == nil) != (got.Arguments == nil) || !bytes.Equal(got.Arguments, args) || got.Tool != "process.jobs" || got.Grant != "g" {
			t.Errorf("sent %d bytes (nil %v), arrived %d (nil %v), tool %q grant %q",
				len(args), args == nil, len(got.Arguments), got.Arguments == nil, got.Tool, got.Grant)
		}
	}
}

// TestLinkAnswersIsTheHoldersWord: the peer says whether the holder's
// link answers, and a replica nobody serves has none.
func TestLinkAnswersIsTheHoldersWord(t *testing.T) {
	h, p := twoPeers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p.LinkAnswers(ctx, "r1", "dev") {
		t.Error("a link that does not answer is said to")
	}
	h.mu.Lock()
	h.alive = true
	h.mu.Unlock()
	if !p.LinkAnswers(ctx, "r1", "dev") {
		t.Error("a link that answers is said not to")
	}
	if p.LinkAnswers(ctx, "r9", "dev") {
		t.Error("a replica nobody serves has a link that answers")
	}
}

// TestCutKeepsEveryByteInBoundedParts: parts are at most n bytes, only
// the last may be shorter, and an exact multiple has no empty tail.
func TestCutKeepsEveryByteInBoundedParts(t *testing.T) {
	for _, tc := range []struct{ size, n, parts int }{{0, 4, 1}, {3, 4, 1}, {4, 4, 1}, {5, 4, 2}, {8, 4, 2}, {9, 4, 3}} {
		b := bytes.Repeat([]byte("x"), tc.size)
		got := cut(b, tc.n)
		if len(got) != tc.parts || !bytes.Equal(bytes.Join(got, nil), b) {
			t.Errorf("cut(%d bytes, %d) = %d parts, want %d", tc.size, tc.n, len(got), tc.parts)
		}
		for i, part := range got {
			if len(part) > tc.n || i < len(got)-1 && len(part) != tc.n {
				t.Errorf("cut(%d bytes, %d): part %d has %d bytes", tc.size, tc.n, i, len(part))
			}
		}
	}
}
