package uplink

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/identity"
	"github.com/commandcore/commandcore/internal/link"
	"github.com/commandcore/commandcore/internal/relay"
	"github.com/commandcore/commandcore/internal/relaystate"
)

// TestPreviousTokenOnlyForAnUnknownToken: the agent presents its previous
// token only after the server said it does not know the newest one; a
// refused device, a busy device or a server in trouble gets no second try.
func TestPreviousTokenOnlyForAnUnknownToken(t *testing.T) {
	for refusal, want := range map[error]string{
		link.ErrUnauthorized:  "new,old",
		link.ErrDeviceRefused: "new",
		link.ErrBusy:          "new",
		errors.New("link: the server refused (HTTP 503)"): "new",
	} {
		var tried []string
		cr := &credentials{token: "new", previous: "old"}
		_, used, err := cr.dial(context.Background(), func(_ context.Context, _, token string) (*websocket.Conn, error) {
			tried = append(tried, token)
			if token == "new" {
				return nil, fmt.Errorf("dial: %w", refusal)
			}
			return nil, nil
		}, "server")
		if strings.Join(tried, ",") != want {
			t.Errorf("after %v: presented %v, want %s", refusal, tried, want)
		}
		if want == "new,old" && (err != nil || used != "old") {
			t.Errorf("the previous token's link: %q %v", used, err)
		}
	}
	// Without a previous token there is nothing else to present.
	var tried int
	cr := &credentials{token: "new"}
	cr.dial(context.Background(), func(context.Context, string, string) (*websocket.Conn, error) {
		tried++
		return nil, link.ErrUnauthorized
	}, "server")
	if tried != 1 {
		t.Fatalf("dialled %d times without a previous token", tried)
	}
}

// TestBusyBacksOff: a device_busy refusal is journalled once as such and
// each retry waits longer.
func TestBusyBacksOff(t *testing.T) {
	journalPath := filepath.Join(t.TempDir(), "activity.db")
	j, err := activity.Open(journalPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var attempts []int
	Run(ctx, Config{
		Identity: &identity.Identity{Server: "http://127.0.0.1:1", Token: "t", Secret: make([]byte, 32)},
		Journal:  j,
		Dial: func(context.Context, string, string) (*websocket.Conn, error) {
			return nil, fmt.Errorf("dial: %w", link.ErrBusy)
		},
		Serve: func(context.Context, *link.Conn) error { return nil },
		Backoff: func(n int) time.Duration {
			if attempts = append(attempts, n); len(attempts) == 3 {
				cancel()
			}
			return time.Millisecond
		},
	})
	j.Close()
	if fmt.Sprint(attempts) != "[1 2 3]" {
		t.Fatalf("backoff attempts while busy: %v", attempts)
	}
	r, err := activity.OpenReader(journalPath)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	events, err := r.Last(100, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Reason != activity.ReasonDeviceBusy {
		t.Fatalf("journal: %+v", events)
	}
}

// relayFor runs a real relay in-process with one enrolled device and
// returns its store and the device's identity.
func relayFor(t *testing.T) (*relaystate.Store, *identity.Identity) {
	t.Helper()
	st, err := relaystate.Open(t.TempDir())
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
	return st, &identity.Identity{Server: url, DeviceID: dev.ID, Token: token, Secret: secret}
}

// serveRelay runs a relay process's server over st and returns its URL.
func serveRelay(t *testing.T, st *relaystate.Store) string {
	t.Helper()
	srv, err := relay.New(st)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close() })
	return hs.URL
}

// runUntil runs the uplink until stop says so (checked on each state
// change and every few milliseconds) and returns.
func runUntil(t *testing.T, cfg Config, stop func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "agent", Version: "test"}, nil)
	cfg.Serve = func(ctx context.Context, conn *link.Conn) error {
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
	Run(ctx, cfg)
	if !stop() {
		t.Fatal("the uplink never got there")
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
	st, id := relayFor(t)
	enrolled := id.Token
	var saved savedTokens
	cfg := Config{Identity: id, SaveToken: saved.save}
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
	id2 := *id
	id2.Token, id2.PreviousToken = first, prev
	cfg.Identity = &id2
	runUntil(t, cfg, func() bool { tok, _ := saved.get(); return tok != first && committed(tok) })
	if _, p := saved.get(); p != first {
		t.Fatal("the second link's previous token is not the one it linked with")
	}

	// Storing fails: the relay keeps the current token.
	current, _ := saved.get()
	saved.mu.Lock()
	saved.fail = true
	saved.mu.Unlock()
	id3 := *id
	id3.Token, id3.PreviousToken = current, first
	cfg.Identity = &id3
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
	st, id := relayFor(t)
	enrolled := id.Token
	var saved savedTokens
	lost := func(token, previous string) error {
		saved.save(token, previous)
		return errors.New("the confirmation is lost")
	}
	runUntil(t, Config{Identity: id, SaveToken: lost}, func() bool { tok, _ := saved.get(); return tok != "" })
	stored, prev := saved.get()
	if prev != enrolled {
		t.Fatal("the stored previous token is not the one the link used")
	}

	restarted := *id
	restarted.Server = serveRelay(t, st)
	restarted.Token, restarted.PreviousToken = stored, prev
	var again savedTokens
	runUntil(t, Config{Identity: &restarted, SaveToken: again.save}, func() bool {
		tok, _ := again.get()
		_, _, err := st.AuthDevice(tok, time.Now())
		return tok != "" && err == nil
	})
	if _, p := again.get(); p != enrolled {
		t.Fatal("the fallback link did not use the previous token")
	}
	d, err := st.FindDevice(id.DeviceID)
	if err != nil || d.Standing != relaystate.StandingActive {
		t.Fatalf("the fallback marked the device: %+v %v", d, err)
	}
}
