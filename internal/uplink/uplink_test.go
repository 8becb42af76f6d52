package uplink

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/identity"
	"github.com/commandcore/commandcore/internal/link"
	"github.com/commandcore/commandcore/internal/status"
)

// TestRunReportsAndJournalsEachEnd drives Run through two refused dials
// and one link the server closes at once: the states say what happened,
// and the journal holds one diagnostic per kind of end, not one per try.
func TestRunReportsAndJournalsEachEnd(t *testing.T) {
	srv := closingServer(t)

	journalPath := filepath.Join(t.TempDir(), "activity.db")
	j, err := activity.Open(journalPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var states []string
	dials := 0
	served := make(chan struct{})
	cfg := Config{
		Identity: &identity.Identity{Server: srv.URL, Token: "t", Secret: make([]byte, 32)},
		Journal:  j,
		OnState: func(s string, _ time.Time) {
			mu.Lock()
			states = append(states, s)
			mu.Unlock()
		},
		Dial: func(ctx context.Context, server, token string) (*websocket.Conn, error) {
			dials++
			if dials <= 2 {
				return nil, fmt.Errorf("dial: %w", link.ErrUnauthorized)
			}
			ws, _, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(server, "http"), nil)
			return ws, err
		},
		Serve: func(ctx context.Context, conn *link.Conn) error {
			<-conn.Done()
			close(served)
			return nil
		},
		Backoff: func(n int) time.Duration {
			select {
			case <-served:
				cancel()
			default:
			}
			return time.Millisecond
		},
	}
	if err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	j.Close()
	mu.Lock()
	got := strings.Join(states, ",")
	mu.Unlock()
	want := strings.Join([]string{status.ConnConnecting, status.ConnDisconnected, status.ConnDisconnected,
		status.ConnConnected, status.ConnDisconnected}, ",")
	if got != want {
		t.Fatalf("states %s, want %s", got, want)
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
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, string(e.Kind)+":"+string(e.Reason))
	}
	if strings.Join(kinds, ",") != "link_end:authentication_failure,link_up:,link_end:remote_close" {
		t.Fatalf("journal: %v", kinds)
	}
}

// TestShortLinksBackOff: links the server ends at once do not restart the
// backoff, so an agent that keeps being dropped waits longer each time.
func TestShortLinksBackOff(t *testing.T) {
	srv := closingServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var attempts []int
	err := Run(ctx, Config{
		Identity: &identity.Identity{Server: srv.URL, Token: "t", Secret: make([]byte, 32)},
		Dial: func(ctx context.Context, server, token string) (*websocket.Conn, error) {
			ws, _, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(server, "http"), nil)
			return ws, err
		},
		Serve: func(ctx context.Context, conn *link.Conn) error { <-conn.Done(); return nil },
		Backoff: func(n int) time.Duration {
			attempts = append(attempts, n)
			if len(attempts) == 4 {
				cancel()
			}
			return time.Millisecond
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(attempts) != "[1 2 3 4]" {
		t.Fatalf("backoff attempts after short links: %v", attempts)
	}
}

// closingServer accepts WebSocket links and closes each at once.
func closingServer(t *testing.T) *httptest.Server {
	upgrader := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		ws.Close()
	}))
	t.Cleanup(srv.Close)
	return srv
}
