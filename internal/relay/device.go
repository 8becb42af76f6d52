package relay

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"github.com/commandcore/commandcore/internal/isolation"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/enrollment"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/transport"
	"github.com/commandcore/commandcore/internal/version"
)

// lastSeenEvery is how often a connected device's last-seen time is
// brought up to date, unless Server.SeenEvery says otherwise.
const lastSeenEvery = time.Minute

// errorBody is the shape of every non-MCP error response.
type errorBody struct {
	Error *errcode.Error `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, errorBody{Error: errcode.From(err)})
}

// httpStatus maps a coded error to the HTTP status that says the same.
func httpStatus(err error) int {
	switch errcode.From(err).Code {
	case errcode.InvalidArgument:
		return http.StatusBadRequest
	case errcode.PermissionDenied:
		return http.StatusForbidden
	case errcode.NotFound:
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

func (s *Server) enroll(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, enrollment.MaxRequestBytes+1))
	if err != nil || len(body) > enrollment.MaxRequestBytes {
		writeError(w, http.StatusBadRequest, errcode.New(errcode.InvalidArgument, "enrollment request is too large or unreadable"))
		return
	}
	req, err := enrollment.DecodeRequest(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	dev, token, secret, err := s.store.Enroll(req.Code, req.Name, s.Now())
	if err != nil {
		writeError(w, httpStatus(err), err)
		return
	}
	writeJSON(w, http.StatusOK, enrollment.Response{
		DeviceID: dev.ID, Name: dev.Name, Token: token, Secret: secret,
		GrantKey: authz.EncodeGrantKey(s.key.Public().(ed25519.PublicKey)),
	})
}

// auditLeave is the audit's tool for a device that left.
const auditLeave = "relay.device_leave"

// leave takes a device's word, with its own credential, that it leaves
// for good (enrollment.LeavePath): it is marked removed, its link ends,
// and the audit says so.
func (s *Server) leave(w http.ResponseWriter, r *http.Request) {
	dev, _, err := s.authLink(bearer(r.Header))
	if err != nil {
		writeError(w, httpStatus(err), err)
		return
	}
	authenticated(r)
	began := s.Now()
	dev, _, err = s.store.LeaveDevice(dev.ID, began)
	if err != nil {
		writeError(w, httpStatus(err), err)
		return
	}
	s.audit.add(store.AuditEntry{At: began, Principal: autoPrincipal, Device: dev.ID, Tool: auditLeave, Outcome: store.AuditOK})
	s.deviceEvent(dev.ID, "left: its agent was uninstalled with its identity")
	s.endDevice(dev.ID, dev.Standing)
	writeJSON(w, http.StatusOK, map[string]string{"device_id": dev.ID, "standing": dev.Standing})
}

// bearer returns the Authorization header's bearer credential.
func bearer(h http.Header) string {
	v := h.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// agent accepts a device's link; serveLink keeps it until it ends. The
// request's handler returns at once: the link outlives the request, and
// net/http then lets go of what it held for it for the link's life (its
// buffers, the request, a goroutine with the handlers' deep stack;
// BENCHMARKS.md, relay capacity).
func (s *Server) agent(w http.ResponseWriter, r *http.Request) {
	dev, conn, token := s.admitLink(w, r)
	if conn == nil {
		return
	}
	go s.serveLink(context.WithoutCancel(r.Context()), dev, conn, token, r.Header.Get(transport.ArchHeader))
}

// serveLink serves a device's accepted link until it ends.
func (s *Server) serveLink(ctx context.Context, dev *store.Device, conn *transport.Conn, token, arch string) {
	defer s.linkEnded(conn)
	defer s.letGo(dev.ID, conn)
	go s.rotate(conn, dev.ID, token)
	client := mcp.NewClient(&mcp.Implementation{Name: "commandcore-relay", Version: version.Version}, nil)
	session, err := client.Connect(ctx, conn, nil)
	if err != nil {
		conn.Close()
		return
	}
	defer session.Close()
	l := newDeviceLink(conn, session)
	info := session.InitializeResult()
	if info != nil && info.ServerInfo != nil {
		l.offer, l.hasOffer = s.offerFor(arch, info.ServerInfo.Version)
	}
	s.mu.Lock()
	// A link closed while it started (taken over, or its device refused)
	// never serves.
	serving := s.held[dev.ID] == conn
	if serving {
		s.links[dev.ID] = l
	}
	s.mu.Unlock()
	if !serving {
		return
	}
	if info != nil && info.ServerInfo != nil {
		offered := ""
		if l.hasOffer {
			offered = l.offer.Version
		}
		note := store.AgentNote{Version: info.ServerInfo.Version, Offered: offered, BindsCalls: announces(info.Capabilities, authz.BindsCallsCapability),
			NumbersGrants: announces(info.Capabilities, authz.GrantSequenceCapability)}
		if info.Capabilities != nil {
			note.Isolation = isolation.FromCapabilities(info.Capabilities.Experimental)
		}
		s.store.NoteAgent(dev.ID, s.replica.ID, note)
		if l.hasOffer {
			s.offerUpdate(ctx, dev.ID, conn, l.offer)
		}
	}
	up := time.Now()
	s.deviceEvent(dev.ID, "link up")
	defer func() {
		s.deviceEvent(dev.ID, "link down ("+string(conn.End())+") after "+time.Since(up).Round(time.Millisecond).String())
	}()
	// One watcher for all links keeps last-seen and standing up to date
	// (watch.go); a link only waits for its end.
	s.watchOnce.Do(func() { go s.watchLinks() })
	<-conn.Done()
	s.mu.Lock()
	current := s.links[dev.ID] == l
	if current {
		delete(s.links, dev.ID)
	}
	s.mu.Unlock()
	if current {
		s.store.ReleaseLink(dev.ID, s.replica.ID, s.Now())
	}
}

// errDeviceOffline answers a call for a device without a live link.
var errDeviceOffline = errcode.New(errcode.DeviceOffline, "the device is not connected to the relay")
