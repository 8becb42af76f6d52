package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/signin"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/relay/updates"
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
// device links and drains the calls for up to shutdownGrace. It reads as
// what a replica starts: the configuration checked, its listeners, the
// replica itself with what it serves, then each listener's server.
func Serve(ctx context.Context, cfg ServeConfig) error {
	cas, err := cfg.check()
	if err != nil {
		return err
	}
	ls, err := listen(&cfg)
	if err != nil {
		return err
	}
	defer ls.close()
	srv, dl, err := startReplica(cfg, ls, cas)
	if err != nil {
		return err
	}
	defer dl.Close()
	defer srv.Close()
	run := newServing(cfg)
	base := announceListening(cfg, ls.main)
	run.main(srv, ls.main)
	if ls.panel != nil {
		if err := run.panel(srv, ls.panel); err != nil {
			return err
		}
	}
	if ls.metrics != nil {
		run.metrics(srv, ls.metrics)
	}
	fmt.Fprintf(cfg.Out, "relay: MCP endpoints %s/mcp and %s/mcp/<device>; agents link to %s/v1/agent\n", base, base, base)
	return run.wait(ctx, srv)
}
