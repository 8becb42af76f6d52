package relay

import (
	"context"
	"errors"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/relay/updates"
	"github.com/commandcore/commandcore/internal/transport"
)

// The audit log's words for an update the relay asked an agent to make:
// by its auto policy, or for an admin at the panel (panel.agent_update,
// the panel's own).
const (
	auditAutoUpdate = "relay.agent_update"
	// autoPrincipal is whose action an auto update is.
	autoPrincipal = "relay"
)

// errCurrent answers an update asked for an agent that runs what the
// relay serves, or with updates off.
var errCurrent = errcode.New(errcode.InvalidArgument, "the device's agent runs the version this relay serves, or agent updates are off")

// offerFor is the update this relay offers an agent of version on arch:
// none without a catalog, under --agent-updates off, or for a current
// agent.
func (s *Server) offerFor(arch, version string) (transport.Offer, bool) {
	if s.Updates == nil {
		return transport.Offer{}, false
	}
	return s.Updates.For(arch, version)
}

// offerUpdate makes a new link's offer: the agent learns of it (and, under
// auto, is asked to install it; audited).
func (s *Server) offerUpdate(ctx context.Context, dev string, conn *transport.Conn, o transport.Offer) {
	if err := conn.Offer(ctx, o); err != nil || !o.Apply {
		return
	}
	s.audit.add(store.AuditEntry{At: s.Now(), Principal: autoPrincipal, Device: dev, Tool: auditAutoUpdate, Outcome: store.AuditOK})
}

// UpdateAgent asks the device's agent to install the binary the relay
// offers it, through whichever replica holds its link. The agent verifies
// and installs it, never as a downgrade, and goes back by itself if the
// new agent does not link; the panel audits the request.
func (s *Server) UpdateAgent(ctx context.Context, deviceID string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := s.router().Call(ctx, deviceID, Call{Tool: updateCall}, nil)
	switch {
	case errors.Is(err, ErrNoRoute):
		return errDeviceOffline
	case err != nil:
		return err
	case string(res) == updateCurrent:
		return errCurrent
	}
	return nil
}

// updateCall is the call a replica sends the one holding a device's link
// to have the agent updated: no tool of the relay's table has this name,
// so no client's call is ever taken for it, and what crosses NATS is
// sealed like every call.
const updateCall = "commandcore/update"

// The holder's answers to updateCall: asked, or nothing to offer.
const (
	updateAsked   = `{"update":"asked"}`
	updateCurrent = `{"update":"current"}`
)

// updateHere asks the agent linked to this process to install its offer.
func (s *Server) updateHere(ctx context.Context, deviceID string) ([]byte, error) {
	s.mu.Lock()
	l := s.links[deviceID]
	s.mu.Unlock()
	if l == nil {
		return nil, ErrNoRoute
	}
	if !l.hasOffer {
		return []byte(updateCurrent), nil
	}
	o := l.offer
	o.Apply = true
	if err := l.conn.Offer(ctx, o); err != nil {
		return nil, errDeviceOffline
	}
	return []byte(updateAsked), nil
}

// UpdatesMode is the relay's update policy (off without a catalog).
func (s *Server) UpdatesMode() updates.Mode {
	if s.Updates == nil {
		return updates.Off
	}
	return s.Updates.Mode()
}
