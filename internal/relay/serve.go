package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/announce"
	"github.com/commandcore/commandcore/internal/relay/metrics"
	"github.com/commandcore/commandcore/internal/relay/signin"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// shutdownGrace bounds a graceful stop of the relay's HTTP servers.
const shutdownGrace = 5 * time.Second

// Serve's refusals of a configuration, before it serves anything.
var (
	// ErrTLSPair: a certificate without its key, or a key without its
	// certificate.
	ErrTLSPair = errors.New("a TLS certificate and its key go together")
	// ErrMetricsTokenAlone: a metrics token without a metrics address.
	ErrMetricsTokenAlone = errors.New("a metrics token goes with a metrics address")
)

// ErrMetricsNeedToken is Serve's refusal to serve metrics off loopback
// without a token: there they are the relay's traffic and its devices'
// comings and goings, for whoever holds the token only.
var ErrMetricsNeedToken = errors.New("metrics off a loopback address need a token")

// ErrPanelPlainHTTP is Serve's refusal to serve the panel off loopback
// without TLS, unless told to: its sign-in codes, session cookies and
// typed secrets would cross the network in clear.
var ErrPanelPlainHTTP = errors.New("the panel off a loopback address needs TLS")

// ErrSSONeedsPanel refuses SSO without a panel to sign in to.
var ErrSSONeedsPanel = errors.New("SSO signs admins in to the panel, which is not served")

// ErrMetricsTokenShort refuses a metrics token too short to resist
// guessing.
var ErrMetricsTokenShort = fmt.Errorf("a metrics token is at least %d bytes", limits.MetricsTokenMinBytes)

// ServeConfig is what Serve needs.
type ServeConfig struct {
	// State is the relay's database; Serve does not close it.
	State store.State
	// Listen is the address of the MCP, enrollment and agent endpoints.
	Listen string
	// TLSCert and TLSKey, both or neither, serve HTTPS.
	TLSCert, TLSKey string
	// MetricsListen, when set, serves Prometheus metrics there over plain
	// HTTP, requiring MetricsToken of every scrape when that is set.
	MetricsListen, MetricsToken string
	// Out gets the announcements, Warn the warnings, Log one line per
	// call.
	Out, Warn io.Writer
	Log       *log.Logger
	// PanelListen, when set, serves the web panel there (under /panel/,
	// with the main listener's TLS). Off loopback it needs TLS, or
	// PanelInsecure.
	PanelListen   string
	PanelInsecure bool
	// PanelURL is the panel's public origin as browsers reach it (the SSO
	// callback and the passkeys' origin derive from it); "" is the panel's
	// own listener, named localhost when it is on loopback.
	PanelURL string
	// OIDC, when set, signs admins in to the panel with the team's
	// identity provider; it needs the panel.
	OIDC *signin.OIDCConfig
	// Replica names this relay among the replicas; its Address is the
	// base URL Serve announces.
	Replica ReplicaConfig
}

// Serve runs the relay until ctx ends or a listener fails, then ends the
// device links and drains the calls for up to shutdownGrace.
func Serve(ctx context.Context, cfg ServeConfig) error {
	switch {
	case (cfg.TLSCert == "") != (cfg.TLSKey == ""):
		return ErrTLSPair
	case cfg.MetricsToken != "" && cfg.MetricsListen == "":
		return ErrMetricsTokenAlone
	case cfg.OIDC != nil && cfg.PanelListen == "":
		return ErrSSONeedsPanel
	}
	// The metrics' listener first: a refusal comes before anything is
	// served or announced.
	var mln net.Listener
	if cfg.MetricsListen != "" {
		var err error
		if mln, err = listenMetrics(cfg.MetricsListen, cfg.MetricsToken); err != nil {
			return err
		}
		defer mln.Close()
	}
	var pln net.Listener
	if cfg.PanelListen != "" {
		var err error
		if pln, err = listenPanel(cfg); err != nil {
			return err
		}
		defer pln.Close()
		cfg.Replica.Panel = baseURL(cfg, pln)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	cfg.Replica.Address = baseURL(cfg, ln)
	srv, err := NewReplica(cfg.State, cfg.Replica)
	if err != nil {
		return err
	}
	srv.Log = cfg.Log
	defer srv.Close()
	base := announceListening(cfg, ln)
	errc := make(chan error, 3)
	hs := srv.HTTPServer()
	go func() {
		if cfg.TLSCert != "" {
			errc <- hs.ServeTLS(ln, cfg.TLSCert, cfg.TLSKey)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	var ps *http.Server
	if pln != nil {
		if srv.SignIn, err = signin.New(signin.Config{State: cfg.State, PanelURL: panelURL(cfg, pln), OIDC: cfg.OIDC, Now: srv.Now}); err != nil {
			return fmt.Errorf("panel sign-in: %w", err)
		}
		if ps, err = srv.PanelServer(cfg.TLSCert != ""); err != nil {
			return fmt.Errorf("panel: %w", err)
		}
		go func() {
			if cfg.TLSCert != "" {
				errc <- ps.ServeTLS(pln, cfg.TLSCert, cfg.TLSKey)
			} else {
				errc <- ps.Serve(pln)
			}
		}()
		fmt.Fprintf(cfg.Out, "%s%s%s\n", announce.Panel, cfg.Replica.Panel, "/panel/")
	}
	var ms *http.Server
	if mln != nil {
		m := metrics.New(srv, metrics.Labels{Tools: AuditTools(), EnrollRefusals: EnrollRefusals})
		srv.Observer = m
		ms = m.Server(cfg.MetricsToken)
		go func() { errc <- ms.Serve(mln) }()
		fmt.Fprintf(cfg.Out, "%shttp://%s%s\n", announce.Metrics, mln.Addr(), metrics.Path)
	}
	fmt.Fprintf(cfg.Out, "relay: MCP endpoints %s/mcp and %s/mcp/<device>; agents link to %s/v1/agent\n", base, base, base)
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	return shutdown(srv, hs, ms, ps)
}

// announceListening says where the relay listens, warning first when it serves
// plain HTTP where agents will refuse it, and returns its base URL.
func announceListening(cfg ServeConfig, ln net.Listener) string {
	base := baseURL(cfg, ln)
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && cfg.TLSCert == "" && !tcp.IP.IsLoopback() && cfg.Warn != nil {
		fmt.Fprintln(cfg.Warn, "relay: warning: serving plain HTTP on a non-loopback address; agents and clients elsewhere need --tls-cert and --tls-key")
	}
	fmt.Fprintf(cfg.Out, "%s%s\n", announce.Listening, base)
	return base
}

// baseURL is the relay's base URL on ln.
func baseURL(cfg ServeConfig, ln net.Listener) string {
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	return scheme + "://" + ln.Addr().String()
}

// panelURL is the panel's public origin: cfg.PanelURL, else its
// listener's, by the name localhost on loopback (passkeys need a host
// name, and browsers count localhost as secure).
func panelURL(cfg ServeConfig, ln net.Listener) *url.URL {
	if cfg.PanelURL != "" {
		if u, err := url.Parse(cfg.PanelURL); err == nil {
			return u
		}
	}
	u, _ := url.Parse(baseURL(cfg, ln))
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		u.Host = net.JoinHostPort("localhost", strconv.Itoa(tcp.Port))
	}
	return u
}

// shutdown ends the device links, then lets the calls drain; the metrics
// stay scrapable until they have.
func shutdown(srv *Server, hs, ms, ps *http.Server) error {
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if ps != nil {
		// Live pages stream until closed; they need not drain.
		ps.Close()
	}
	err := hs.Shutdown(ctx)
	if ms != nil {
		ms.Shutdown(ctx)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}

// listenPanel opens the panel's listener, refusing plain HTTP off
// loopback (judged by the address bound) unless cfg.PanelInsecure.
func listenPanel(cfg ServeConfig) (net.Listener, error) {
	ln, err := net.Listen("tcp", cfg.PanelListen)
	if err != nil {
		return nil, fmt.Errorf("listen for the panel: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); cfg.TLSCert == "" && !cfg.PanelInsecure && (!ok || !tcp.IP.IsLoopback()) {
		ln.Close()
		return nil, fmt.Errorf("%s is not a loopback address: %w", cfg.PanelListen, ErrPanelPlainHTTP)
	}
	return ln, nil
}

// listenMetrics opens the metrics' listener at addr, judging loopback by
// the address bound, so a name that resolves elsewhere is caught too.
func listenMetrics(addr, token string) (net.Listener, error) {
	if token != "" && len(token) < limits.MetricsTokenMinBytes {
		return nil, ErrMetricsTokenShort
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); token == "" && (!ok || !tcp.IP.IsLoopback()) {
		ln.Close()
		return nil, fmt.Errorf("%s is not a loopback address: %w", addr, ErrMetricsNeedToken)
	}
	return ln, nil
}
