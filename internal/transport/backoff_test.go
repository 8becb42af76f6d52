package transport

import (
	"context"
	"errors"
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
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/status"
)

// TestRunReportsAndJournalsEachEnd drives Run through two refused dials
// and one link the server closes at once: the states say what happened,
// and the journal holds one diagnostic per kind of end, not one per try.
func TestRunReportsAndJournalsEachEnd(t *testing.T) {
	srv := closingServer(t)
	j, journalled := journalFor(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var states []string
	dials := 0
	served := make(chan struct{})
	cfg := Config{
		Servers: []string{srv.URL}, Token: "t", Secret: make([]byte, 32),
		Journal: j,
		OnState: func(s string, _ time.Time) {
			mu.Lock()
			states = append(states, s)
			mu.Unlock()
		},
		Dial: func(ctx context.Context, server, token string) (*websocket.Conn, error) {
			dials++
			if dials <= 2 {
				return nil, fmt.Errorf("dial: %w", ErrUnauthorized)
			}
			ws, _, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(server, "http"), nil)
			return ws, err
		},
		Serve: func(ctx context.Context, conn *Conn) error {
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
	events := journalled()
	mu.Lock()
	got := strings.Join(states, ",")
	mu.Unlock()
	want := strings.Join([]string{status.ConnConnecting, status.ConnDisconnected, status.ConnDisconnected,
		status.ConnConnected, status.ConnDisconnected}, ",")
	if got != want {
		t.Fatalf("states %s, want %s", got, want)
	}
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, string(e.Kind)+":"+string(e.Reason))
	}
	if strings.Join(kinds, ",") != "link_end:authentication_failure,link_up:,link_end:remote_close" {
		t.Fatalf("journal: %v", kinds)
	}
}

// TestBusyBacksOff: a device_busy refusal is journalled once as such and
// each retry waits longer.
func TestBusyBacksOff(t *testing.T) {
	j, journalled := journalFor(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var attempts []int
	Run(ctx, Config{
		Servers: []string{"http://127.0.0.1:1"}, Token: "t", Secret: make([]byte, 32),
		Journal: j,
		Dial: func(context.Context, string, string) (*websocket.Conn, error) {
			return nil, fmt.Errorf("dial: %w", ErrBusy)
		},
		Serve: func(context.Context, *Conn) error { return nil },
		Backoff: func(n int) time.Duration {
			if attempts = append(attempts, n); len(attempts) == 3 {
				cancel()
			}
			return time.Millisecond
		},
	})
	events := journalled()
	if fmt.Sprint(attempts) != "[1 2 3]" {
		t.Fatalf("backoff attempts while busy: %v", attempts)
	}
	if len(events) != 1 || events[0].Reason != activity.ReasonDeviceBusy {
		t.Fatalf("journal: %+v", events)
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
		Servers: []string{srv.URL}, Token: "t", Secret: make([]byte, 32),
		Dial: func(ctx context.Context, server, token string) (*websocket.Conn, error) {
			ws, _, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(server, "http"), nil)
			return ws, err
		},
		Serve: func(ctx context.Context, conn *Conn) error { <-conn.Done(); return nil },
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

func TestBackoff(t *testing.T) {
	for n := -2; n <= 80; n++ {
		d := limits.ReconnectMin
		for i := 1; i < n && d < limits.ReconnectMax; i++ {
			d *= 2
		}
		d = min(d, limits.ReconnectMax)
		for range 200 {
			got := Backoff(n)
			if got < d/2 || got > d {
				t.Fatalf("Backoff(%d) = %v, want in [%v, %v]", n, got, d/2, d)
			}
		}
	}
	if got := Backoff(1 << 40); got < limits.ReconnectMax/2 || got > limits.ReconnectMax {
		t.Fatalf("Backoff(huge) = %v", got)
	}
	// Spot values, independent of the loop above.
	if got := Backoff(1); got < 500*time.Millisecond || got > time.Second {
		t.Fatalf("Backoff(1) = %v", got)
	}
	if got := Backoff(4); got < 4*time.Second || got > 8*time.Second {
		t.Fatalf("Backoff(4) = %v", got)
	}
	if got := Backoff(7); got < 30*time.Second || got > time.Minute {
		t.Fatalf("Backoff(7) = %v", got)
	}
	// Jitter: 200 draws over a one-second range are not all equal.
	first, same := Backoff(2), true
	for range 200 {
		if Backoff(2) != first {
			same = false
		}
	}
	if same {
		t.Fatal("Backoff(2) has no jitter")
	}
}

// TestEndsAreTheJournalsWords: every kind of end reaches the agent's
// journal as the word the README gives it, with no translation
// on the way, and a local shutdown is the one end that is not a failure.
func TestEndsAreTheJournalsWords(t *testing.T) {
	words := map[End]string{
		EndRemoteClose:   "remote_close",
		EndSendTimeout:   "send_timeout",
		EndSilence:       "silence_timeout",
		EndProtocol:      "protocol_error",
		EndAuth:          "authentication_failure",
		EndLocalShutdown: "local_shutdown",
		EndNetworkError:  "network_error",
		EndDeviceBusy:    "device_busy",
	}
	j, journalled := journalFor(t)
	var journal Journal = j
	for e := range words {
		journal.LinkEnd(string(e), time.Second)
	}
	got := map[string]activity.Outcome{}
	for _, ev := range journalled() {
		got[string(ev.Reason)] = ev.Outcome
	}
	for e, word := range words {
		outcome, ok := got[word]
		if !ok {
			t.Errorf("End %q is not journalled as %q (journal: %v)", e, word, got)
			continue
		}
		want := activity.OutcomeFailed
		if e == EndLocalShutdown {
			want = activity.OutcomeOK
		}
		if outcome != want {
			t.Errorf("%s journalled %s, want %s", word, outcome, want)
		}
	}
}

// journalFor opens a fresh activity journal; journalled closes it and
// reads back what it recorded.
func journalFor(t *testing.T) (j *activity.Journal, journalled func() []activity.Event) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "activity.db")
	j, err := activity.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return j, func() []activity.Event {
		t.Helper()
		j.Close()
		r, err := activity.OpenReader(path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		events, err := r.Last(100, false)
		if err != nil {
			t.Fatal(err)
		}
		return events
	}
}

// TestServersTakenInTurn: each failed dial and each lost link moves on to
// the next server, round the list, with the backoff between.
func TestServersTakenInTurn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var dialled, told []string
	err := Run(ctx, Config{
		Servers: []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"}, Token: "t", Secret: make([]byte, 32),
		OnServer: func(s string) { told = append(told, s) },
		Dial: func(_ context.Context, server, _ string) (*websocket.Conn, error) {
			if dialled = append(dialled, server); len(dialled) == 5 {
				cancel()
			}
			return nil, errors.New("refused")
		},
		Serve:   func(context.Context, *Conn) error { return nil },
		Backoff: func(int) time.Duration { return time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "[http://127.0.0.1:1 http://127.0.0.1:2 http://127.0.0.1:3 http://127.0.0.1:1 http://127.0.0.1:2]"
	if fmt.Sprint(dialled) != want || fmt.Sprint(told) != want {
		t.Fatalf("servers dialled %v, reported %v; want %s", dialled, told, want)
	}
	if err := Run(ctx, Config{Token: "t"}); err == nil {
		t.Fatal("Run without a server ran")
	}
}
