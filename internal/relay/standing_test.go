package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/testkit"
	"github.com/commandcore/commandcore/internal/transport"
)

// serving returns the relay's end of the device's serving link, or nil.
func (h *harness) serving() *transport.Conn {
	if l := h.srv.connected(h.dev.ID); l != nil {
		return l.conn
	}
	return nil
}

// dialAgent links a fake device with token, storing rotated tokens with
// rotate, and waits until the relay serves a link other than before.
func (h *harness) dialAgent(tb testing.TB, token string, rotate func(string) error) *transport.Conn {
	tb.Helper()
	before := h.serving()
	ws, err := transport.Dial(context.Background(), h.hs.URL, token)
	if err != nil {
		tb.Fatal(err)
	}
	conn := transport.Agent(ws, h.secret, transport.Options{Rotate: rotate})
	tb.Cleanup(func() { conn.Close() })
	if _, err := fakeDevice().Connect(context.Background(), conn, nil); err != nil {
		tb.Fatal(err)
	}
	testkit.Eventually(tb, 20*time.Second, func() error {
		if c := h.serving(); c == nil || c == before {
			return errors.New("the fake device never linked")
		}
		return nil
	})
	return conn
}

// tokenStore is an agent's token file.
type tokenStore struct {
	mu  sync.Mutex
	tok string
}

func (s *tokenStore) store(tok string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tok = tok
	return nil
}

func (s *tokenStore) get() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tok
}

func waitDone(t *testing.T, c *transport.Conn, what string) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: the link did not end", what)
	}
}

// TestSilentLinkIsReplaced: a second link for a device whose link no
// longer answers heartbeats (a frozen or vanished agent) closes the old
// one and is accepted.
func TestSilentLinkIsReplaced(t *testing.T) {
	h := newHarness(t, nil)
	frozen, err := transport.Dial(context.Background(), h.hs.URL, h.token)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	testkit.Eventually(t, 20*time.Second, func() error {
		h.srv.mu.Lock()
		held := h.srv.held[h.dev.ID] != nil
		h.srv.mu.Unlock()
		if !held {
			return errors.New("the frozen link was never admitted")
		}
		return nil
	})
	h.dialAgent(t, h.token, nil)
	// The relay closed the frozen link: reading it ends.
	frozen.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		if _, _, err := frozen.ReadMessage(); err != nil {
			if strings.Contains(err.Error(), "timeout") {
				t.Fatal("the frozen link was left open")
			}
			break
		}
	}
}

// TestEveryLinkRotates: an accepted link hands the agent a new token; the
// old one coming back marks the device compromised, ends its link, is
// logged without the token, and refuses every token of the device.
func TestEveryLinkRotates(t *testing.T) {
	var logged bytes.Buffer
	var logMu sync.Mutex
	h := newHarness(t, func(s *Server) { s.Log = log.New(lockedWriter{&logMu, &logged}, "", 0) })
	var ts tokenStore
	agent := h.dialAgent(t, h.token, ts.store)
	next := waitToken(t, h, &ts, h.token)

	// The agent's old token is now a copy's.
	if _, err := transport.Dial(context.Background(), h.hs.URL, h.token); !errors.Is(err, transport.ErrDeviceRefused) {
		t.Fatalf("the rotated-away token: %v", err)
	}
	waitDone(t, agent, "after a copy showed")
	if _, err := transport.Dial(context.Background(), h.hs.URL, next); !errors.Is(err, transport.ErrDeviceRefused) {
		t.Fatalf("the current token of a compromised device: %v", err)
	}
	d, err := h.st.FindDevice(h.dev.ID)
	if err != nil || d.Standing != store.StandingCompromised {
		t.Fatalf("device %+v %v", d, err)
	}
	logMu.Lock()
	out := logged.String()
	logMu.Unlock()
	if !strings.Contains(out, h.dev.ID) || !strings.Contains(out, "compromised") ||
		strings.Contains(out, h.token[4:]) || strings.Contains(out, next[4:]) {
		t.Fatalf("log:\n%s", out)
	}
}

// waitToken waits until the agent stored a token other than old and the
// relay committed it.
func waitToken(t *testing.T, h *harness, ts *tokenStore, old string) string {
	t.Helper()
	var tok string
	testkit.Eventually(t, 20*time.Second, func() error {
		if tok = ts.get(); tok == "" || tok == old {
			return errors.New("the link never rotated the token: the agent stored no new one")
		}
		if _, _, err := h.st.AuthDevice(tok, time.Now()); err != nil {
			return fmt.Errorf("the link never rotated the token: the relay did not take the stored one: %v", err)
		}
		return nil
	})
	return tok
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestLostAckStillLinks: an agent that stored its next token but whose
// confirmation never arrived links with it, and that retires the old one.
func TestLostAckStillLinks(t *testing.T) {
	h := newHarness(t, nil)
	var ts tokenStore
	agent := h.dialAgent(t, h.token, func(tok string) error {
		ts.store(tok)
		return errors.New("crashed before confirming")
	})
	testkit.Eventually(t, 20*time.Second, func() error {
		if ts.get() == "" {
			return errors.New("no rotation arrived")
		}
		return nil
	})
	if _, _, err := h.st.AuthDevice(h.token, time.Now()); err != nil {
		t.Fatalf("an unconfirmed rotation retired the old token: %v", err)
	}
	agent.Close()
	h.dialAgent(t, ts.get(), nil)
	if _, err := transport.Dial(context.Background(), h.hs.URL, h.token); !errors.Is(err, transport.ErrDeviceRefused) {
		t.Fatalf("the token before the promoted one: %v", err)
	}
}

// TestRevokedDeviceLinkEnds: revoking a device in the database, as the CLI
// does from another process, ends its link within the standing poll, and
// its tokens are refused afterwards.
func TestRevokedDeviceLinkEnds(t *testing.T) {
	h := newHarness(t, nil)
	agent := h.dialAgent(t, h.token, nil)
	if _, _, err := h.st.RevokeDevice("dev", time.Now()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, agent, "after the revocation")
	if _, err := transport.Dial(context.Background(), h.hs.URL, h.token); !errors.Is(err, transport.ErrDeviceRefused) {
		t.Fatalf("a revoked device's token: %v", err)
	}
}

// TestUnconfirmedRotationEndsLink: a link whose agent never takes the
// token it is handed is closed, and the token it linked with still works:
// nothing was rotated.
func TestUnconfirmedRotationEndsLink(t *testing.T) {
	h := newHarness(t, func(s *Server) { s.RotateWait = 50 * time.Millisecond })
	for range 2 {
		ws, err := transport.Dial(context.Background(), h.hs.URL, h.token)
		if err != nil {
			t.Fatalf("the token of an unconfirmed rotation: %v", err)
		}
		agent := transport.Agent(ws, h.secret, transport.Options{})
		if _, err := fakeDevice().Connect(context.Background(), agent, nil); err != nil {
			t.Fatal(err)
		}
		waitDone(t, agent, "without a confirmation")
		agent.Close()
	}
}
