package transport_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/relay"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/transport"
)

// relayFor runs a real relay in-process with one enrolled device and
// returns its store, the device's ID and the link's configuration with
// the device's enrolled credentials.
func relayFor(t *testing.T) (*store.Store, string, transport.Config) {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	url := serveRelay(t, st)
	code, err := st.CreateEnrollCode("dev", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dev, token, secret, err := st.Enroll(code, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return st, dev.ID, transport.Config{Servers: []string{url}, Token: token, Secret: secret}
}

// relays are the relays serveRelay runs, by store: one at a time, as one
// relay process on its state.
var relays sync.Map

// serveRelay runs a relay process's server over st and returns its URL;
// one already running over st stops first, as a restarted relay's
// process does.
func serveRelay(t *testing.T, st *store.Store) string {
	t.Helper()
	if stop, ok := relays.LoadAndDelete(st); ok {
		stop.(func())()
	}
	srv, err := relay.New(st)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	stop := sync.OnceFunc(func() { srv.Close(); hs.Close() })
	relays.Store(st, stop)
	t.Cleanup(stop)
	return hs.URL
}

// runUntil runs the agent's link until stop says so (checked on each state
// change and every few milliseconds) and returns.
func runUntil(t *testing.T, cfg transport.Config, stop func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "agent", Version: "test"}, nil)
	cfg.Serve = func(ctx context.Context, conn *transport.Conn) error {
		ss, err := srv.Connect(ctx, conn, nil)
		if err != nil {
			return err
		}
		return ss.Wait()
	}
	cfg.Backoff = func(int) time.Duration { return 10 * time.Millisecond }
	go func() {
		for ctx.Err() == nil && !stop() {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	transport.Run(ctx, cfg)
	if !stop() {
		t.Fatal("the agent never got there")
	}
}

// savedTokens is an identity file's tokens.
type savedTokens struct {
	mu              sync.Mutex
	token, previous string
	fail            bool
}

func (s *savedTokens) save(token, previous string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return errors.New("disk full")
	}
	s.token, s.previous = token, previous
	return nil
}

func (s *savedTokens) get() (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token, s.previous
}

// TestTokenRotatesThroughARealRelay: a link with a real relay stores a new
// token, with the one it linked with as the previous; a restarted agent
// links with the new one, and that rotates again. A token the agent could
// not store is never made current.
func TestTokenRotatesThroughARealRelay(t *testing.T) {
	st, _, cfg := relayFor(t)
	enrolled := cfg.Token
	var saved savedTokens
	cfg.SaveToken = saved.save
	committed := func(tok string) bool {
		_, _, err := st.AuthDevice(tok, time.Now())
		return tok != "" && err == nil
	}
	runUntil(t, cfg, func() bool { tok, _ := saved.get(); return committed(tok) })
	first, prev := saved.get()
	if first == enrolled || prev != enrolled {
		t.Fatalf("after the first link: token changed %v, previous is the enrolled one %v", first != enrolled, prev == enrolled)
	}

	// The restarted agent, from what it stored.
	cfg.Token, cfg.PreviousToken = first, prev
	runUntil(t, cfg, func() bool { tok, _ := saved.get(); return tok != first && committed(tok) })
	if _, p := saved.get(); p != first {
		t.Fatal("the second link's previous token is not the one it linked with")
	}

	// Storing fails: the relay keeps the current token.
	current, _ := saved.get()
	saved.mu.Lock()
	saved.fail = true
	saved.mu.Unlock()
	cfg.Token, cfg.PreviousToken = current, first
	var linked bool
	cfg.OnState = func(s string, _ time.Time) { linked = linked || s == "connected" }
	deadline := time.Now().Add(500 * time.Millisecond)
	runUntil(t, cfg, func() bool { return time.Now().After(deadline) })
	if !linked {
		t.Fatal("the agent never linked with its current token")
	}
	if !committed(current) {
		t.Fatal("a rotation the agent could not store retired its token")
	}
}

// TestRelayRestartBeforeCommitFallsBack: the agent stored its next token
// but the relay that sent it restarted before it committed the rotation;
// the new relay does not know that token, so the agent links with its
// previous one, which is still current, and rotates from there.
func TestRelayRestartBeforeCommitFallsBack(t *testing.T) {
	st, device, cfg := relayFor(t)
	enrolled := cfg.Token
	var saved savedTokens
	lost := func(token, previous string) error {
		saved.save(token, previous)
		return errors.New("the confirmation is lost")
	}
	losing := cfg
	losing.SaveToken = lost
	runUntil(t, losing, func() bool { tok, _ := saved.get(); return tok != "" })
	stored, prev := saved.get()
	if prev != enrolled {
		t.Fatal("the stored previous token is not the one the link used")
	}

	restarted := cfg
	restarted.Servers = []string{serveRelay(t, st)}
	restarted.Token, restarted.PreviousToken = stored, prev
	var again savedTokens
	restarted.SaveToken = again.save
	runUntil(t, restarted, func() bool {
		tok, _ := again.get()
		_, _, err := st.AuthDevice(tok, time.Now())
		return tok != "" && err == nil
	})
	if _, p := again.get(); p != enrolled {
		t.Fatal("the fallback link did not use the previous token")
	}
	d, err := st.FindDevice(device)
	if err != nil || d.Standing != store.StandingActive {
		t.Fatalf("the fallback marked the device: %+v %v", d, err)
	}
}
