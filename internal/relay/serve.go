package relay

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/announce"
	"github.com/commandcore/commandcore/internal/relay/downloads"
	"github.com/commandcore/commandcore/internal/relay/metrics"
	"github.com/commandcore/commandcore/internal/relay/oauth"
	"github.com/commandcore/commandcore/internal/relay/signin"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/relay/updates"
	"github.com/commandcore/commandcore/internal/version"
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
	// Replica names this relay among the replicas; its Address is the
	// base URL Serve announces.
	Replica ReplicaConfig
	// PublicURL names the relay as clients and devices reach it (the
	// install line's URL, and OAuth's issuer), PanelPublicURL the panel
	// as browsers do; empty, the listeners' own. With the panel, the
	// relay is an OAuth authorization server (docs/oauth.md).
	PublicURL, PanelPublicURL string
	// OAuthPrivateClients lets client ID metadata documents live on
	// loopback, private or link-local addresses; OAuthClientCA names a
	// PEM file of CAs their certificates may chain to.
	OAuthPrivateClients bool
	OAuthClientCA       string
	// OIDC, when set, signs admins in to the panel with the team's
	// identity provider; it needs the panel. SSO's callback and the
	// passkeys' origin derive from PanelPublicURL's origin.
	OIDC *signin.OIDCConfig
	// Downloads, when set, is a release directory (make release's
	// layout) whose files the relay serves to devices beside its own
	// binary; install.sh and the relay's own binary are served either way.
	Downloads string
	// AgentUpdates is the policy for agents of another version than the
	// binary served for their architecture (package updates); "" is
	// notify.
	AgentUpdates updates.Mode
	// AllowedOrigins are the web origins, besides the public URL's, whose
	// pages may call the MCP endpoints (a browser-based client's).
	AllowedOrigins []string
	// MaxCallWait bounds how long one call blocks; zero is
	// limits.RelayCallWait.
	MaxCallWait time.Duration
	// TrustedProxies are the addresses and CIDR prefixes of proxies whose
	// forwarding headers name the client (SetTrustedProxies).
	TrustedProxies []string
}

// ErrMaxCallWait refuses a call wait out of its range.
var ErrMaxCallWait = fmt.Errorf("a call wait is from 1s to %s", limits.ForwardTimeout)

// ErrOAuthNeedsPanel refuses OAuth options without the panel: its consent
// page is where a person allows a client.
var ErrOAuthNeedsPanel = errors.New("OAuth's consent page is the panel's")

// ErrSSONeedsPanel refuses SSO without a panel to sign in to.
var ErrSSONeedsPanel = errors.New("SSO signs admins in to the panel, which is not served")

// ErrClientCA refuses a client CA file that holds no certificate.
var ErrClientCA = errors.New("the client CA file holds no PEM certificate")

// Serve runs the relay until ctx ends or a listener fails, then ends the
// device links and drains the calls for up to shutdownGrace.
func Serve(ctx context.Context, cfg ServeConfig) error {
	switch {
	case (cfg.TLSCert == "") != (cfg.TLSKey == ""):
		return ErrTLSPair
	case cfg.MetricsToken != "" && cfg.MetricsListen == "":
		return ErrMetricsTokenAlone
	case cfg.PanelListen == "" && (cfg.PanelPublicURL != "" || cfg.OAuthPrivateClients || cfg.OAuthClientCA != ""):
		return ErrOAuthNeedsPanel
	case cfg.OIDC != nil && cfg.PanelListen == "":
		return ErrSSONeedsPanel
	case cfg.MaxCallWait != 0 && (cfg.MaxCallWait < time.Second || cfg.MaxCallWait > limits.ForwardTimeout):
		return ErrMaxCallWait
	}
	if cfg.PublicURL != "" {
		if _, err := oauth.CheckPublicURL(cfg.PublicURL); err != nil {
			return err
		}
	}
	if cfg.PanelPublicURL != "" {
		if err := oauth.CheckPanelURL(cfg.PanelPublicURL); err != nil {
			return err
		}
	}
	// Checked now; set once the relay is made.
	if _, err := parseOrigins(cfg.AllowedOrigins); err != nil {
		return err
	}
	if err := new(Server).SetTrustedProxies(cfg.TrustedProxies); err != nil {
		return err
	}
	cas, err := clientCAs(cfg.OAuthClientCA)
	if err != nil {
		return err
	}
	// The metrics' listener first: a refusal comes before anything is
	// served or announced.
	var mln net.Listener
	if cfg.MetricsListen != "" {
		if mln, err = listenMetrics(cfg.MetricsListen, cfg.MetricsToken); err != nil {
			return err
		}
		defer mln.Close()
	}
	var pln net.Listener
	if cfg.PanelListen != "" {
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
	// The downloads' files are opened before the relay joins the others:
	// a release it cannot serve refuses the start.
	public := cfg.PublicURL
	if public == "" {
		public = cfg.Replica.Address
	}
	dl, err := downloads.New(downloads.Config{PublicURL: public, Dir: cfg.Downloads})
	if err != nil {
		return err
	}
	defer dl.Close()
	// For the administration commands' install lines (relay enroll-code).
	recorded := ""
	if cfg.PublicURL != "" {
		recorded, _ = oauth.CheckPublicURL(cfg.PublicURL)
	}
	if err := cfg.State.SetPublicURL(recorded); err != nil {
		return fmt.Errorf("record the public URL: %w", err)
	}
	srv, err := NewReplica(cfg.State, cfg.Replica)
	if err != nil {
		return err
	}
	srv.Log = cfg.Log
	srv.MaxCallWait = cfg.MaxCallWait
	srv.SetTrustedProxies(cfg.TrustedProxies)
	defer srv.Close()
	srv.SetAllowedOrigins(public, cfg.AllowedOrigins)
	if pln != nil {
		oc := OAuthConfig{PublicURL: public, PanelURL: cfg.PanelPublicURL, PrivateClients: cfg.OAuthPrivateClients, ClientCAs: cas}
		if oc.PanelURL == "" {
			oc.PanelURL = cfg.Replica.Panel + "/panel/"
		}
		if err := srv.SetOAuth(oc); err != nil {
			return err
		}
	}
	srv.Downloads = dl
	cat, err := updates.New(updates.Config{Mode: cfg.AgentUpdates, Version: version.Version, Dir: cfg.Downloads, Sums: dl.Sums})
	if err != nil {
		return err
	}
	srv.Updates = cat
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
		// Behind a TLS proxy the listener is plain HTTP, but browsers reach
		// the panel over HTTPS: its cookies are Secure either way.
		if ps, err = srv.PanelServer(cfg.TLSCert != "" || panelURL(cfg, pln).Scheme == "https"); err != nil {
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

// panelURL is the panel's public origin: PanelPublicURL's, else its
// listener's, by the name localhost on loopback (passkeys need a host
// name, and browsers count localhost as secure).
func panelURL(cfg ServeConfig, ln net.Listener) *url.URL {
	if u, err := url.Parse(cfg.PanelPublicURL); cfg.PanelPublicURL != "" && err == nil {
		return &url.URL{Scheme: u.Scheme, Host: u.Host}
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

// clientCAs reads the PEM file of CAs a client ID metadata document's
// certificate may chain to, with the system's; "" is the system's alone.
func clientCAs(file string) (*x509.CertPool, error) {
	if file == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, ErrClientCA
	}
	return pool, nil
}
