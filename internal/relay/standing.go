package relay

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/transport"
)

// A device has at most one link (README). When another arrives while it
// has one, the relay heartbeats the old link with a short deadline: if the
// old link answers, the newcomer is refused with device_busy; if not, the
// old link is closed and the newcomer accepted, so an agent restarted
// after a crash is back within seconds rather than after the silence
// timeout. Admissions of one device are serialised, so two newcomers can
// never both take a device over. Across replicas the state records which
// replica holds the link: a newcomer at another replica heartbeats the
// holder's link through it (Peers.LinkAnswers) and the state's TakeLink
// lets one replica win.
//
// The relay also ends a device's links when its standing changes: at once
// when this process finds a copy (see rotate.go), and within StandingPoll
// when another process (`relay devices revoke`) changed it in the shared
// database.
const (
	// busyProbe is how long the old link has to answer its heartbeat.
	busyProbe = 2 * time.Second
	// StandingPoll is how often the standings of linked devices are
	// checked (watch.go): a revocation by another process ends the link
	// within it.
	StandingPoll = time.Second
)

var errDeviceBusy = errcode.New(errcode.DeviceBusy, "the device has a live link to the relay already")

// admitLink authenticates a device's link and upgrades it once the device
// has no other live link; on refusal it answers the request and returns a
// nil conn. The returned conn holds the device until letGo.
func (s *Server) admitLink(w http.ResponseWriter, r *http.Request) (*store.Device, *transport.Conn, string) {
	token := bearer(r.Header)
	dev, secret, err := s.authLink(token)
	if err != nil {
		refuseLink(w, err)
		return nil, nil, ""
	}
	authenticated(r)
	release, ok := s.admitting(r.Context(), dev.ID)
	if !ok {
		return nil, nil, ""
	}
	defer release()
	s.mu.Lock()
	old := s.held[dev.ID]
	s.mu.Unlock()
	if old != nil {
		ctx, cancel := context.WithTimeout(r.Context(), busyProbe)
		alive := old.Alive(ctx)
		cancel()
		if alive {
			writeError(w, http.StatusConflict, errDeviceBusy)
			return nil, nil, ""
		}
		// Closing waits out the closing handshake with a peer that may
		// never answer; the newcomer need not.
		go old.Close()
	}
	took, err := s.takeLink(r.Context(), dev.ID)
	switch {
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err)
		return nil, nil, ""
	case !took:
		writeError(w, http.StatusConflict, errDeviceBusy)
		return nil, nil, ""
	}
	conn, err := transport.Accept(w, r, secret, s.Link)
	if err != nil {
		s.store.ReleaseLink(dev.ID, s.replica.ID, s.Now())
		return nil, nil, ""
	}
	s.hold(dev.ID, conn)
	return dev, conn, token
}

// hold takes conn as the device's link, the one endDevice closes, until
// letGo.
func (s *Server) hold(device string, conn *transport.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[device] = conn
	s.holds++
}

// refuseLink answers a link whose credentials were not accepted: 403 for a
// device that may not link, 401 for a token the relay does not know, and
// 503 when it could not tell, so an agent never takes a relay in trouble
// for one that forgot its token (which would make it present its previous
// token).
func refuseLink(w http.ResponseWriter, err error) {
	var refused *store.DeviceRefusal
	switch {
	case errors.As(err, &refused):
		writeError(w, http.StatusForbidden, err)
	case errcode.Is(err, errcode.PermissionDenied):
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeError(w, http.StatusUnauthorized, err)
	default:
		writeError(w, http.StatusServiceUnavailable, err)
	}
}

// admitting serialises the admissions of one device: it waits for any
// other admission of the device to finish and returns its own release,
// or false when ctx ends first.
func (s *Server) admitting(ctx context.Context, device string) (func(), bool) {
	for {
		s.mu.Lock()
		busy, ok := s.admissions[device]
		if !ok {
			mine := make(chan struct{})
			s.admissions[device] = mine
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				delete(s.admissions, device)
				s.mu.Unlock()
				close(mine)
			}, true
		}
		s.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// letGo releases the device conn held, unless another link took it over.
func (s *Server) letGo(device string, conn *transport.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[device] == conn {
		delete(s.held, device)
	}
}

// endDevice closes the device's link, if it has one, because its standing
// is no longer active, and forgets its pending rotation.
func (s *Server) endDevice(device, standing string) {
	s.rotations.forget(device)
	s.mu.Lock()
	conn := s.held[device]
	s.mu.Unlock()
	if conn == nil {
		return
	}
	s.deviceEvent(device, "standing "+standing+": its link is closed")
	go conn.Close()
}

// deviceEvent records one content-free line about a device on the relay's
// log (Server.Log): the device's ID and what happened, never a token. It is the one place such events pass, for an audit log to hook.
func (s *Server) deviceEvent(device, what string) {
	if s.Log != nil {
		s.Log.Printf("device %s: %s", device, what)
	}
}
