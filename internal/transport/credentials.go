package transport

import (
	"context"
	"errors"
	"sync"

	"github.com/gorilla/websocket"
)

// credentials are the device tokens the agent may present, newest first,
// and where a token the server rotates in is stored (internal/relay's
// rotate.go has the scheme).
type credentials struct {
	save func(token, previous string) error

	mu       sync.Mutex
	token    string
	previous string
}

// dial opens a link with the newest token and, only when the server does
// not know it (401, never a refusal of the device nor a server in trouble),
// with the previous one. It returns the token the link was opened with.
func (cr *credentials) dial(ctx context.Context, dial func(context.Context, string, string) (*websocket.Conn, error), server string) (*websocket.Conn, string, error) {
	cr.mu.Lock()
	token, previous := cr.token, cr.previous
	cr.mu.Unlock()
	ws, err := dial(ctx, server, token)
	if errors.Is(err, ErrUnauthorized) && previous != "" && previous != token {
		if ws, err = dial(ctx, server, previous); err == nil {
			return ws, previous, nil
		}
	}
	return ws, token, err
}

// storer returns what stores the token a server hands over on a link
// opened with used: it is the newest token, and used the previous, once
// stored; until then (or without a store) the link does not acknowledge it.
func (cr *credentials) storer(used string) func(string) error {
	if cr.save == nil {
		return nil
	}
	return func(next string) error {
		if err := cr.save(next, used); err != nil {
			return err
		}
		cr.mu.Lock()
		cr.token, cr.previous = next, used
		cr.mu.Unlock()
		return nil
	}
}
