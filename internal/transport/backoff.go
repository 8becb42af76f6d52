package transport

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/gorilla/websocket"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/status"
)

// The agent's end: Run keeps an enrolled agent's link to its server. It
// dials, hands each live link to the MCP server, records how each link
// ended, and reconnects with capped, jittered backoff. Each link
// may rotate the device token; the agent stores the new one before the
// server may rely on it (credentials.go). Managed jobs do not depend on
// it: a link's end cancels only foreground calls.

// Config is what Run needs.
type Config struct {
	// Servers are the server's URLs (its replicas), tried in turn: after
	// a failed dial or a lost link the next one is dialled. Token,
	// PreviousToken and Secret are the device's credentials
	// (internal/enrollment keeps them).
	Servers              []string
	Token, PreviousToken string
	Secret               []byte
	// Serve serves MCP over one live link; it returns when the link ends.
	Serve func(ctx context.Context, conn *Conn) error
	// Journal receives link_up and link_end events; nil records nothing.
	Journal Journal
	// OnState reports each change of the connection's state, OnServer
	// each server dialled.
	OnState  func(state string, at time.Time)
	OnServer func(server string)
	// Link tunes each link; zero values are docs/limits.md's bounds. Its Rotate
	// is set per link from SaveToken.
	Link Options
	// SaveToken stores the token a server rotated in, with previous, the
	// token of the link that handed it over (enrollment.SaveToken). Nil:
	// rotations are not acknowledged and the server keeps the token.
	SaveToken func(token, previous string) error
	// Dial opens the WebSocket; nil means Dial.
	Dial func(ctx context.Context, server, token string) (*websocket.Conn, error)
	// Backoff is the wait before reconnect attempt n; nil means Backoff.
	Backoff func(n int) time.Duration
}

// Journal records the link's diagnostics (how each ended); *activity.Journal is
// one. The transport does not import the journal: the relay links this
// package and must not link the job core the journal knows.
type Journal interface {
	// LinkUp records that a link was established.
	LinkUp()
	// LinkEnd records how a link ended (reason is an End) and how long it
	// was up; a failed dial was up for 0.
	LinkEnd(reason string, up time.Duration)
}

// noJournal records nothing.
type noJournal struct{}

func (noJournal) LinkUp()                       {}
func (noJournal) LinkEnd(string, time.Duration) {}

// Run keeps the link up until ctx ends.
func Run(ctx context.Context, c Config) error {
	dial, backoff := c.Dial, c.Backoff
	if dial == nil {
		dial = Dial
	}
	if backoff == nil {
		backoff = Backoff
	}
	if c.Journal == nil {
		c.Journal = noJournal{}
	}
	state := func(s string) {
		if c.OnState != nil {
			c.OnState(s, time.Now().UTC())
		}
	}
	creds := &credentials{save: c.SaveToken, token: c.Token, previous: c.PreviousToken}
	if len(c.Servers) == 0 {
		return errors.New("link: no server")
	}
	var lastDialFailure End
	for attempt, next := 0, 0; ; next++ {
		// Retries keep reporting disconnected, so "since" says when the
		// link was lost, not when the last attempt began.
		if attempt == 0 {
			state(status.ConnConnecting)
		}
		// The server of a lost link or a failed dial may be the one that
		// is gone: the next is tried first.
		server := c.Servers[next%len(c.Servers)]
		if c.OnServer != nil {
			c.OnServer(server)
		}
		ws, used, err := creds.dial(ctx, dial, server)
		if err == nil {
			lastDialFailure = ""
			opt := c.Link
			opt.Rotate = creds.storer(used)
			// Only a link that lasted restarts the backoff: one the server
			// ends at once (a server in trouble) must not be redialled in a
			// tight loop.
			if serve(ctx, c, ws, opt, state) >= stableLink {
				attempt = 0
			}
		} else if ctx.Err() == nil {
			// Refusals back off like any failed dial: another agent with
			// this identity (device_busy) is not hammered out of its link.
			reason := EndNetworkError
			switch {
			case errors.Is(err, ErrUnauthorized), errors.Is(err, ErrDeviceRefused):
				reason = EndAuth
			case errors.Is(err, ErrBusy):
				reason = EndDeviceBusy
			}
			// A long outage is one diagnostic, not one per attempt.
			if reason != lastDialFailure {
				c.Journal.LinkEnd(string(reason), 0)
				lastDialFailure = reason
			}
		}
		if ctx.Err() != nil {
			state(status.ConnDisconnected)
			return nil
		}
		state(status.ConnDisconnected)
		attempt++
		t := time.NewTimer(backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Backoff returns the wait before reconnect attempt n (n>=1; smaller n is
// treated as 1): exponential from limits.ReconnectMin, capped at
// limits.ReconnectMax, with full jitter in [d/2, d].
func Backoff(n int) time.Duration {
	d := limits.ReconnectMin
	for i := 1; i < n && d < limits.ReconnectMax; i++ {
		d *= 2
	}
	d = min(d, limits.ReconnectMax)
	half := d / 2
	return half + rand.N(d-half+1)
}

// stableLink is how long a link must last for the backoff to start over.
const stableLink = time.Minute

// serve runs one link to its end, records how it ended, and returns how
// long it was up.
func serve(ctx context.Context, c Config, ws *websocket.Conn, opt Options, state func(string)) time.Duration {
	conn := Agent(ws, c.Secret, opt)
	up := time.Now()
	c.Journal.LinkUp()
	state(status.ConnConnected)
	served := make(chan struct{})
	go func() {
		defer close(served)
		c.Serve(ctx, conn)
	}()
	select {
	case <-conn.Done():
	case <-ctx.Done():
		conn.Close()
	}
	<-conn.Done()
	<-served
	lasted := time.Since(up)
	c.Journal.LinkEnd(string(conn.End()), lasted)
	return lasted
}
