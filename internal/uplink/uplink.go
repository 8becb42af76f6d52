// Package uplink keeps an enrolled agent's link to its server: it dials,
// hands each live link to the MCP server, records how each link ended,
// and reconnects with capped, jittered backoff (SPEC §4). Each link may
// rotate the device token; the agent stores the new one before the server
// may rely on it (rotate.go). Managed jobs do not depend on it: a link's
// end cancels only foreground calls.
package uplink

import (
	"context"
	"errors"
	"time"

	"github.com/gorilla/websocket"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/identity"
	"github.com/commandcore/commandcore/internal/link"
	"github.com/commandcore/commandcore/internal/status"
)

// Config is what Run needs.
type Config struct {
	Identity *identity.Identity
	// Serve serves MCP over one live link; it returns when the link ends.
	Serve func(ctx context.Context, conn *link.Conn) error
	// Journal receives link_up and link_end events; nil records nothing.
	Journal *activity.Journal
	// OnState reports each change of the connection's state.
	OnState func(state string, at time.Time)
	// Link tunes each link; zero values are SPEC §8's bounds. Its Rotate
	// is set per link from SaveToken.
	Link link.Options
	// SaveToken stores the token a server rotated in, with previous, the
	// token of the link that handed it over (identity.SaveToken). Nil:
	// rotations are not acknowledged and the server keeps the token.
	SaveToken func(token, previous string) error
	// Dial opens the WebSocket; nil means link.Dial.
	Dial func(ctx context.Context, server, token string) (*websocket.Conn, error)
	// Backoff is the wait before reconnect attempt n; nil means link.Backoff.
	Backoff func(n int) time.Duration
}

// Run keeps the link up until ctx ends.
func Run(ctx context.Context, c Config) error {
	dial, backoff := c.Dial, c.Backoff
	if dial == nil {
		dial = link.Dial
	}
	if backoff == nil {
		backoff = link.Backoff
	}
	state := func(s string) {
		if c.OnState != nil {
			c.OnState(s, time.Now().UTC())
		}
	}
	creds := &credentials{save: c.SaveToken, token: c.Identity.Token, previous: c.Identity.PreviousToken}
	var lastDialFailure activity.Reason
	for attempt := 0; ; {
		// Retries keep reporting disconnected, so "since" says when the
		// link was lost, not when the last attempt began.
		if attempt == 0 {
			state(status.ConnConnecting)
		}
		ws, used, err := creds.dial(ctx, dial, c.Identity.Server)
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
			reason := activity.ReasonNetworkError
			switch {
			case errors.Is(err, link.ErrUnauthorized), errors.Is(err, link.ErrDeviceRefused):
				reason = activity.ReasonAuthFailure
			case errors.Is(err, link.ErrBusy):
				reason = activity.ReasonDeviceBusy
			}
			// A long outage is one diagnostic, not one per attempt.
			if reason != lastDialFailure {
				c.Journal.Record(activity.LinkEndEvent(reason, 0))
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

// stableLink is how long a link must last for the backoff to start over.
const stableLink = time.Minute

// serve runs one link to its end, records how it ended, and returns how
// long it was up.
func serve(ctx context.Context, c Config, ws *websocket.Conn, opt link.Options, state func(string)) time.Duration {
	conn := link.Agent(ws, c.Identity.Secret, opt)
	up := time.Now()
	c.Journal.Record(activity.Event{Kind: activity.KindLinkUp, Outcome: activity.OutcomeOK})
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
	c.Journal.Record(activity.LinkEndEvent(Reason(conn.End()), lasted))
	return lasted
}

// Reason maps a link's end to the journal's closed set of reasons.
func Reason(e link.End) activity.Reason {
	switch e {
	case link.EndRemoteClose:
		return activity.ReasonRemoteClose
	case link.EndSendTimeout:
		return activity.ReasonSendTimeout
	case link.EndSilence:
		return activity.ReasonSilenceTimeout
	case link.EndProtocol:
		return activity.ReasonProtocolError
	case link.EndAuth:
		return activity.ReasonAuthFailure
	case link.EndLocalShutdown:
		return activity.ReasonLocalShutdown
	}
	return activity.ReasonNetworkError
}
