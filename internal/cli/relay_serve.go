package cli

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay"
	"github.com/commandcore/commandcore/internal/relay/cluster"
	"github.com/commandcore/commandcore/internal/relay/oauth"
	"github.com/commandcore/commandcore/internal/relay/signin"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/relay/updates"
)

type relayServeOptions struct {
	IO IO
	// The flags as given.
	Listen, Cert, Key, MetricsListen, MetricsToken string
	// NATS joins the other replicas; Name names this one.
	NATS cluster.Options
	Name string
	// PanelListen serves the web panel; PanelInsecure allows it plain
	// HTTP off loopback.
	PanelListen   string
	PanelInsecure bool
	// PublicURL and PanelPublicURL name the relay and its panel as
	// clients and browsers reach them; OAuthPrivateClients and
	// OAuthClientCA tune the fetch of client ID metadata documents.
	PublicURL, PanelPublicURL string
	OAuthPrivateClients       bool
	OAuthClientCA             string
	// Downloads is a release directory to serve to devices.
	Downloads string
	// AgentUpdates is --agent-updates.
	AgentUpdates string
	// The OIDC flags sign admins in with the team's identity provider.
	OIDCIssuer, OIDCClientID, OIDCClientSecretFile, OIDCAllow string
	// AllowedOrigins are --allowed-origins.
	AllowedOrigins []string
	// MaxCallWait is --max-call-wait.
	MaxCallWait time.Duration
	// TrustedProxies are --trusted-proxies.
	TrustedProxies []string
}

func newRelayServeCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &relayServeOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "serve --listen ADDR [--tls-cert F --tls-key F] [--metrics-listen ADDR [--metrics-token TOKEN]] [--public-url URL] [--panel-listen ADDR [--panel-insecure] [--panel-public-url URL] [--oauth-private-clients] [--oauth-client-ca F] [--oidc-issuer URL --oidc-client-id ID --oidc-client-secret-file F --oidc-allow RULES]] [--allowed-origins ORIGIN,…] [--max-call-wait DURATION] [--trusted-proxies CIDR,…] [--downloads DIR] [--agent-updates off|notify|auto] [--database URL --nats URL [--nats-creds F | --nats-nkey F] [--nats-ca F] [--nats-insecure] [--name NAME]]",
		Short: "Run the relay",
		Args:  exactArgs(0),
		RunE:  func(cmd *cobra.Command, _ []string) error { return runRelayServe(cmd, g, o) },
	}
	cmd.Flags().StringVar(&o.Listen, "listen", "127.0.0.1:8440", "address to listen on")
	cmd.Flags().StringVar(&o.Cert, "tls-cert", "", "TLS certificate file (PEM)")
	cmd.Flags().StringVar(&o.Key, "tls-key", "", "TLS key file (PEM)")
	cmd.Flags().StringVar(&o.MetricsListen, "metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics (plain HTTP); off loopback only with --metrics-token")
	cmd.Flags().StringVar(&o.PanelListen, "panel-listen", "", "serve the web panel at ADDR/panel/ (with --tls-cert and --tls-key when given); admins sign in with relay admin create")
	cmd.Flags().BoolVar(&o.PanelInsecure, "panel-insecure", false, "serve the panel over plain HTTP on an address that is not loopback (its sign-in codes, cookies and typed secrets cross the network in clear)")
	cmd.Flags().StringVar(&o.PublicURL, "public-url", "", "the relay's URL as clients and devices reach it (https://HOST[:PORT]; every replica behind a load balancer gets the same); the install line, OAuth's issuer and resource names derive from it (default: the listener's own URL)")
	cmd.Flags().StringVar(&o.PanelPublicURL, "panel-public-url", "", "the panel's URL as browsers reach it, e.g. https://HOST/panel/; OAuth's consent page is its consent/<request> (default: the panel listener's own URL)")
	cmd.Flags().StringSliceVar(&o.AllowedOrigins, "allowed-origins", nil, "web origins (https://HOST[:PORT], comma-separated) whose pages may call the MCP endpoints besides the public URL's, for browser-based clients such as the MCP Inspector's UI; a request with any other Origin header gets 403")
	cmd.Flags().StringSliceVar(&o.TrustedProxies, "trusted-proxies", nil, "addresses or CIDR prefixes (comma-separated) of the reverse proxies in front of the relay: a request from one of them is counted against the client its X-Forwarded-For or Forwarded header names (rate limits, the audit's refusals); from anywhere else the headers are ignored")
	cmd.Flags().DurationVar(&o.MaxCallWait, "max-call-wait", limits.RelayCallWait, "how long one call through the relay may block (1s to "+limits.ForwardTimeout.String()+"): a longer process.wait returns then and says to call again, a longer process.run is refused; chat clients give up on a call after a while (claude.ai after 300 s)")
	cmd.Flags().StringVar(&o.OIDCIssuer, "oidc-issuer", "", "sign admins in to the panel with this OpenID provider (its issuer URL); its redirect URI is the panel's origin (--panel-public-url's) followed by "+signin.CallbackPath)
	cmd.Flags().StringVar(&o.OIDCClientID, "oidc-client-id", "", "the relay's client ID at the OpenID provider")
	cmd.Flags().StringVar(&o.OIDCClientSecretFile, "oidc-client-secret-file", "", "file holding the relay's client secret at the OpenID provider")
	cmd.Flags().StringVar(&o.OIDCAllow, "oidc-allow", "", "who the OpenID provider may sign in, comma-separated: verified e-mail addresses (alice@example.com), domains (@example.com), groups (group:admins)")
	cmd.Flags().BoolVar(&o.OAuthPrivateClients, "oauth-private-clients", false, "let an OAuth client ID metadata document live on any address, a loopback, private or link-local one among them (without it, every special-purpose address range is refused)")
	cmd.Flags().StringVar(&o.OAuthClientCA, "oauth-client-ca", "", "a CA file (PEM) a client ID metadata document's HTTPS certificate may chain to, besides the system's")
	cmd.Flags().StringVar(&o.NATS.URL, "nats", "", "join the other relay replicas on this --database through the NATS server at this URL (nats://HOST:PORT, tls://HOST:PORT; user and password or a token may ride in it); off loopback only with TLS or --nats-insecure")
	cmd.Flags().StringVar(&o.NATS.Creds, "nats-creds", "", "authenticate to NATS with this .creds file (JWT and NKey seed)")
	cmd.Flags().StringVar(&o.NATS.NKey, "nats-nkey", "", "authenticate to NATS with the NKey seed in this file")
	cmd.Flags().StringVar(&o.NATS.CA, "nats-ca", "", "TLS to NATS, verifying its certificate with this CA file (PEM)")
	cmd.Flags().StringVar(&o.NATS.Cert, "nats-cert", "", "client certificate for NATS (PEM), with --nats-key")
	cmd.Flags().StringVar(&o.NATS.Key, "nats-key", "", "client certificate key for NATS (PEM), with --nats-cert")
	cmd.Flags().BoolVar(&o.NATS.Insecure, "nats-insecure", false, "allow plain NATS to a server off loopback (the network between the replicas is trusted)")
	cmd.Flags().StringVar(&o.AgentUpdates, "agent-updates", string(updates.Notify), "agents of another version than the binary served for their architecture: off (nothing said), notify (shown as outdated, offered the binary; they update when asked: the panel's Update, commandcore update), auto (asked to update as they link)")
	cmd.Flags().StringVar(&o.Downloads, "downloads", "", "serve the release in this directory (make release's dist/: the files its SHA256SUMS names) to devices at /download/, beside this relay's own binary; /install.sh installs from there")
	cmd.Flags().StringVar(&o.Name, "name", "", "this replica's name in relay replicas and relay devices (default: the host name)")
	cmd.Flags().StringVar(&o.MetricsToken, "metrics-token", "", fmt.Sprintf("a secret of at least %d bytes every metrics scrape must present (Authorization: Bearer TOKEN)", limits.MetricsTokenMinBytes))
	return cmd
}

func runRelayServe(cmd *cobra.Command, g *globalFlags, o *relayServeOptions) error {
	mode, err := updates.ParseMode(o.AgentUpdates)
	if err != nil {
		return usageError("%v", err)
	}
	if o.NATS.URL != "" {
		// Refused before the state is opened or NATS dialled.
		if err := o.NATS.Check(); err != nil {
			return usageError("%s", errcode.From(err).Message)
		}
	}
	oidc, err := o.oidc()
	if err != nil {
		return err
	}
	st, err := openRelayState(g)
	if err != nil {
		return err
	}
	defer st.Close()
	replica := relay.ReplicaConfig{Name: o.Name}
	if o.NATS.URL != "" {
		key, err := st.ClusterKey()
		if err != nil {
			return fmt.Errorf("cluster key: %w", err)
		}
		nc, err := cluster.Connect(o.NATS, o.Name)
		if err != nil {
			return err
		}
		defer nc.Close()
		if replica.Peers, err = cluster.New(nc, key); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), unix.SIGINT, unix.SIGTERM)
	defer stop()
	return serveFlagError(relay.Serve(ctx, relay.ServeConfig{State: st, Listen: o.Listen, TLSCert: o.Cert, TLSKey: o.Key,
		MetricsListen: o.MetricsListen, MetricsToken: o.MetricsToken, PanelListen: o.PanelListen, PanelInsecure: o.PanelInsecure, Replica: replica,
		PublicURL: o.PublicURL, PanelPublicURL: o.PanelPublicURL, OAuthPrivateClients: o.OAuthPrivateClients, OAuthClientCA: o.OAuthClientCA,
		Downloads: o.Downloads, AgentUpdates: mode, OIDC: oidc, AllowedOrigins: o.AllowedOrigins, MaxCallWait: o.MaxCallWait, TrustedProxies: o.TrustedProxies,
		Out: o.IO.Out, Warn: o.IO.Err, Log: log.New(stampedLog{o.IO.Err}, "", 0)}))
}

// oidc reads the SSO flags: all four or none, a secret file that holds
// one line, an issuer URL and rules that parse; nil without them.
func (o *relayServeOptions) oidc() (*signin.OIDCConfig, error) {
	given := 0
	for _, f := range []string{o.OIDCIssuer, o.OIDCClientID, o.OIDCClientSecretFile, o.OIDCAllow} {
		if f != "" {
			given++
		}
	}
	switch given {
	case 0:
		return nil, nil
	case 4:
	default:
		return nil, usageError("--oidc-issuer, --oidc-client-id, --oidc-client-secret-file and --oidc-allow go together")
	}
	if u, err := url.Parse(o.OIDCIssuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, usageError("--oidc-issuer must be the provider's issuer URL (https://…)")
	}
	rules, err := signin.ParseRules(o.OIDCAllow)
	if err != nil {
		return nil, usageError("--oidc-allow: %v", err)
	}
	secret, err := os.ReadFile(o.OIDCClientSecretFile)
	if err != nil {
		return nil, usageError("--oidc-client-secret-file cannot be read")
	}
	s := strings.TrimSpace(string(secret))
	if s == "" || strings.ContainsAny(s, "\r\n") {
		return nil, usageError("--oidc-client-secret-file must hold the client secret on one line")
	}
	return &signin.OIDCConfig{Issuer: o.OIDCIssuer, ClientID: o.OIDCClientID, ClientSecret: s, Rules: rules}, nil
}

// serveFlagError names the flags behind relay.Serve's refusals of its
// configuration, as usage errors.
func serveFlagError(err error) error {
	switch {
	case errors.Is(err, relay.ErrTLSPair):
		return usageError("--tls-cert and --tls-key go together")
	case errors.Is(err, relay.ErrMetricsTokenAlone):
		return usageError("--metrics-token goes with --metrics-listen")
	case errors.Is(err, relay.ErrMetricsTokenShort):
		return usageError("--metrics-token must be at least %d bytes", limits.MetricsTokenMinBytes)
	case errors.Is(err, relay.ErrSSONeedsPanel):
		return usageError("--oidc-issuer signs admins in to the panel; give --panel-listen too")
	case errors.Is(err, relay.ErrPanelPlainHTTP):
		return usageError("--panel-listen %v; give --tls-cert and --tls-key, or --panel-insecure to serve it in clear", err)
	case errors.Is(err, relay.ErrOAuthNeedsPanel):
		return usageError("--panel-public-url, --oauth-private-clients and --oauth-client-ca go with --panel-listen: OAuth's consent page is the panel's")
	case errors.Is(err, oauth.ErrPublicURL):
		return usageError("--public-url: %v", err)
	case errors.Is(err, relay.ErrTrustedProxy):
		return usageError("--trusted-proxies: %v", err)
	case errors.Is(err, relay.ErrMaxCallWait):
		return usageError("--max-call-wait: %v", err)
	case errors.Is(err, relay.ErrAllowedOrigin):
		return usageError("--allowed-origins: %v", err)
	case errors.Is(err, oauth.ErrPanelURL):
		return usageError("--panel-public-url: %v", err)
	case errors.Is(err, relay.ErrClientCA):
		return usageError("--oauth-client-ca: %v", err)
	case errors.Is(err, relay.ErrMetricsNeedToken):
		return usageError("--metrics-listen %v; serving metrics there needs --metrics-token, which every scrape must then present", err)
	}
	return err
}

// stampedLog writes each of the relay's log lines after "relay: " and the
// local time, as the agent's lines carry theirs.
type stampedLog struct{ w io.Writer }

func (l stampedLog) Write(line []byte) (int, error) {
	if _, err := l.w.Write(append([]byte("relay: "+time.Now().Format("2006-01-02 15:04:05.000")+"  "), line...)); err != nil {
		return 0, err
	}
	return len(line), nil
}

// relayDatabaseEnv names the PostgreSQL URL of the relay's state when
// --database is not given.
const relayDatabaseEnv = "COMMANDCORE_RELAY_DATABASE"

// relayDatabase is the PostgreSQL URL of the relay's state: --database,
// else $COMMANDCORE_RELAY_DATABASE; "" for SQLite.
func relayDatabase(g *globalFlags) string {
	if g.database != "" {
		return g.database
	}
	return os.Getenv(relayDatabaseEnv)
}

// openRelayState opens the relay's database: PostgreSQL at --database (or
// $COMMANDCORE_RELAY_DATABASE), else SQLite in the state directory.
func openRelayState(g *globalFlags) (store.State, error) {
	if url := relayDatabase(g); url != "" {
		return store.OpenPostgres(url)
	}
	dir, err := relayStateDir(g)
	if err != nil {
		return nil, err
	}
	return store.Open(dir)
}

// relayStateDir is the relay's state directory: --state-dir, else the
// default. The relay has no config directory, so with --state-dir it needs
// no home directory to find one: the system service's dynamic user has none.
func relayStateDir(g *globalFlags) (string, error) {
	if g.stateDir != "" {
		return filepath.Abs(g.stateDir)
	}
	dirs, err := g.dirs()
	return dirs.State, err
}
