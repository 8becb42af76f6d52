package relay

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/relay/panel"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// PanelServer serves the web panel (package panel) over this relay's
// state and devices; secure marks its cookies for TLS. Set OAuth first
// (SetOAuth): its consent page answers in the issuer's name. Its live pages
// stream for as long as they are open, so it has no write timeout; the
// panel bounds what it reads.
func (s *Server) PanelServer(secure bool) (*http.Server, error) {
	cfg := panel.Config{
		State: s.store, Devices: s, Secrets: s, Health: s.health, Audit: s.audit.add,
		LimitSignIn: s.limit(surfaceSignIn), SignIn: s.SignIn, Secure: secure, Now: s.Now, Log: s.Log,
	}
	if o := s.oauth.Load(); o != nil {
		// The consent page answers clients in the issuer's name (RFC 9207);
		// the issuer is the relay's public URL, which devices reach too.
		cfg.Issuer, cfg.PublicURL = o.Issuer(), o.Issuer()
	}
	p, err := panel.New(cfg)
	if err != nil {
		return nil, err
	}
	t := s.Timeouts.withDefaults()
	return &http.Server{Handler: p.Handler(), ReadHeaderTimeout: t.Header, ReadTimeout: t.Unauthenticated, IdleTimeout: t.Idle}, nil
}

// reachable is what a replica's peers say of their NATS connection.
type reachable interface{ Reachable() bool }

// health is the Overview's: the database answers a read, and NATS (for a
// replica that joined the others through it) is connected.
func (s *Server) health() []panel.Check {
	_, err := s.store.StandingChanges()
	checks := []panel.Check{{Name: "database", OK: err == nil}}
	if r, ok := s.peers.(reachable); ok {
		checks = append(checks, panel.Check{Name: "NATS", OK: r.Reachable()})
	} else if s.peers == nil {
		checks = append(checks, panel.Check{Name: "NATS", OK: true, Detail: "not used: this relay runs alone"})
	}
	return checks
}

// AdminPrincipal is the principal an admin of the panel acts as on
// devices.
func AdminPrincipal(admin string) string { return "admin:" + admin }

// CallAsAdmin calls tool on the device as the panel's admin, with a grant
// for the principal AdminPrincipal(admin), and returns the structured
// result, or the tool's error as an *errcode.Error. The device decides
// what an admin may do (list, read and stop jobs); the relay only carries
// the call, as a client's.
func (s *Server) CallAsAdmin(ctx context.Context, admin, deviceID, tool string, args json.RawMessage) (json.RawMessage, error) {
	if !store.ValidAdminName(admin) {
		return nil, errcode.New(errcode.PermissionDenied, "not an admin")
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	dev, err := s.store.FindDevice(deviceID)
	if err != nil {
		return nil, s.deviceFailure(err)
	}
	g, err := s.grant(dev, tool, AdminPrincipal(admin), args)
	if err != nil {
		return nil, err
	}
	raw, err := s.router().Call(ctx, deviceID, Call{Tool: tool, Arguments: args, Grant: g}, nil)
	if err != nil {
		return nil, s.callFailure(ctx, err)
	}
	return resultOf(raw)
}

// resultOf reads a device's tool result: its structured content, or the
// tool's error as an *errcode.Error.
func resultOf(raw []byte) (json.RawMessage, error) {
	var res struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if json.Unmarshal(raw, &res) != nil {
		return nil, errcode.New(errcode.Internal, "the device's result could not be read")
	}
	if res.IsError {
		var failed struct {
			Error struct {
				Code    errcode.Code `json:"code"`
				Message string       `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(res.StructuredContent, &failed) != nil || failed.Error.Code == "" {
			return nil, errcode.New(errcode.Internal, "the device failed the call without saying why")
		}
		return nil, errcode.New(failed.Error.Code, "%s", failed.Error.Message)
	}
	return res.StructuredContent, nil
}
