package relay

import (
	"crypto/x509"
	"net/http"
	"strings"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/relay/oauth"
	"github.com/commandcore/commandcore/internal/relay/oauth/cimd"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// OAuthConfig makes the relay an OAuth 2.1 authorization server for the
// clients that sign in (docs/oauth.md).
type OAuthConfig struct {
	// PublicURL is the relay as clients reach it; PanelURL the panel as
	// browsers reach it (the consent page is its consent/<request>).
	PublicURL, PanelURL string
	// PrivateClients lets a client ID metadata document live on a
	// loopback, private or link-local address; ClientCAs, when set, are
	// the CAs its certificate may chain to besides the system's.
	PrivateClients bool
	ClientCAs      *x509.CertPool
}

// SetOAuth serves the authorization server's endpoints from now on, and
// points clients without a token at them.
func (s *Server) SetOAuth(cfg OAuthConfig) error {
	o, err := oauth.New(oauth.Config{
		State: s.store, PublicURL: cfg.PublicURL, PanelURL: cfg.PanelURL,
		Clients:       cimd.New(cimd.Options{AllowPrivate: cfg.PrivateClients, RootCAs: cfg.ClientCAs, Now: s.Now}),
		LimitRegister: s.limit(surfaceRegister), LimitAuthorize: s.limit(surfaceAuthorize), Source: s.clientSource, Audit: s.audit.add, Now: s.Now,
	})
	if err != nil {
		return err
	}
	s.oauth.Store(o)
	return nil
}

// oauthEndpoints serves the metadata and /oauth/ paths while OAuth is on.
func (s *Server) oauthEndpoints(w http.ResponseWriter, r *http.Request) {
	o := s.oauth.Load()
	if o == nil {
		http.NotFound(w, r)
		return
	}
	o.Handler().ServeHTTP(w, r)
}

// errResource refuses an OAuth token at an MCP URL it was not issued for.
var errResource = errcode.New(errcode.PermissionDenied, "this token was issued for another MCP URL of the relay")

// challenge is the WWW-Authenticate value of a 401 to r at the endpoint
// for device: the protected resource metadata's URL while OAuth is on.
func (s *Server) challenge(r *http.Request, device, errCode string) string {
	if o := s.oauth.Load(); o != nil {
		return o.Challenge(device, strings.HasSuffix(r.URL.Path, "/"), errCode)
	}
	if errCode != "" {
		return `Bearer error="` + errCode + `"`
	}
	return "Bearer"
}

// forResource reports whether tok may be used at the endpoint for device:
// a static token anywhere its scopes allow, an OAuth connection's only at
// the MCP URL it was issued for (RFC 8707), and not at all while OAuth is
// off.
func (s *Server) forResource(tok *store.Token, device string) bool {
	if tok.Kind != store.TokenOAuth {
		return true
	}
	o := s.oauth.Load()
	return o != nil && tok.Resource == o.Resource(device)
}
