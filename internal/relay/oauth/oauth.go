// Package oauth is the relay as an OAuth 2.1 authorization server, the
// HTTP side: discovery (RFC 9728, RFC 8414), dynamic client registration
// (RFC 7591), the authorization endpoint, which checks a request and sends
// the browser to the panel's consent page, the token endpoint
// (authorization code with PKCE, refresh with rotation) and revocation
// (RFC 7009). Everything a step keeps lives in the relay's state, so any
// replica serves any step; client ID metadata documents are fetched by
// package cimd.
package oauth

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/relay/oauth/cimd"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// The endpoints' paths, at the public URL's origin: claude.ai's web
// connector sends /authorize, /token and /register there whatever the
// metadata says (anthropics/claude-ai-mcp #82, #962), so the metadata
// advertises them there too.
const (
	AuthorizePath = "/authorize"
	TokenPath     = "/token"
	RegisterPath  = "/register"
	RevokePath    = "/revoke"
	// LegacyPrefix is where the endpoints lived first: clients registered
	// against /oauth/… keep their paths, answered the same.
	LegacyPrefix         = "/oauth"
	ResourceMetadataPath = "/.well-known/oauth-protected-resource"
	ServerMetadataPath   = "/.well-known/oauth-authorization-server"
	mcpPath              = "/mcp"
	consentPath          = "consent/"
)

// The audit log's rows of the sign-in's steps: the tool column names the
// step, a failed row's code says why. They hold the connection's token ID
// and principal, never a secret.
const (
	AuditToken   = "oauth.token"   // tokens issued for a code
	AuditRefresh = "oauth.refresh" // a refresh token spent for new tokens
	AuditRevoke  = "oauth.revoke"  // a connection ended by RFC 7009 revocation
	// AuditReused is the code of a code or refresh token presented a
	// second time: the connection is revoked.
	AuditReused = "reused"
)

// Config is what the authorization server needs.
type Config struct {
	State store.State
	// PublicURL is the relay as clients reach it (CheckPublicURL's form):
	// the issuer, and the base of every resource and metadata URL.
	PublicURL string
	// PanelURL is the panel as browsers reach it; the consent page is
	// PanelURL's consent/<request>.
	PanelURL string
	// Clients fetches client ID metadata documents.
	Clients *cimd.Fetcher
	// LimitRegister bounds registrations per source, LimitAuthorize
	// authorization requests; nil does not.
	LimitRegister, LimitAuthorize func(http.Handler) http.Handler
	// Source is the source key of the client a request comes from (an
	// address, an IPv6 /64), against which its pending authorization
	// requests count; nil counts every request as from one source.
	Source func(*http.Request) string
	// Audit receives the content-free rows of tokens issued, refreshed,
	// reused and revoked; nil drops them.
	Audit func(store.AuditEntry)
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Server serves the authorization server's endpoints.
type Server struct {
	cfg     Config
	consent string // the panel's consent URL up to the request ID
	handler http.Handler
}

// ErrPublicURL refuses a public URL that is not an http(s) origin.
var ErrPublicURL = errors.New("a public URL is http:// or https://, a host and nothing after it but a '/'")

// CheckPublicURL returns u in the form the relay names itself with (no
// trailing '/'), or ErrPublicURL: a scheme, a host, no path, query,
// fragment or user.
func CheckPublicURL(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "http" && p.Scheme != "https" || p.Host == "" || p.Hostname() == "" || p.User != nil ||
		p.RawQuery != "" || p.ForceQuery || p.Fragment != "" || strings.Contains(u, "#") || p.Path != "" && p.Path != "/" {
		return "", ErrPublicURL
	}
	return p.Scheme + "://" + p.Host, nil
}

// ErrPanelURL refuses a panel URL that is not an http(s) URL.
var ErrPanelURL = errors.New("the panel's public URL is an http:// or https:// URL without query or fragment")

// CheckPanelURL refuses a panel URL that is not an http(s) URL without
// user, query or fragment.
func CheckPanelURL(u string) error {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "http" && p.Scheme != "https" || p.Host == "" || p.User != nil || p.RawQuery != "" || p.Fragment != "" ||
		strings.Contains(u, "#") {
		return ErrPanelURL
	}
	return nil
}

// New returns the authorization server.
func New(cfg Config) (*Server, error) {
	pub, err := CheckPublicURL(cfg.PublicURL)
	if err != nil {
		return nil, err
	}
	cfg.PublicURL = pub
	if err := CheckPanelURL(cfg.PanelURL); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Source == nil {
		cfg.Source = func(*http.Request) string { return "" }
	}
	if cfg.Clients == nil {
		cfg.Clients = cimd.New(cimd.Options{Now: cfg.Now})
	}
	s := &Server{cfg: cfg, consent: strings.TrimSuffix(cfg.PanelURL, "/") + "/" + consentPath}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+ServerMetadataPath, s.serverMetadata)
	mux.HandleFunc("GET "+ResourceMetadataPath, s.resourceMetadata)
	mux.HandleFunc("GET "+ResourceMetadataPath+mcpPath, s.resourceMetadata)
	mux.HandleFunc("GET "+ResourceMetadataPath+mcpPath+"/{device}", s.resourceMetadata)
	mux.HandleFunc("GET "+ResourceMetadataPath+mcpPath+"/{$}", s.resourceMetadata)
	mux.HandleFunc("GET "+ResourceMetadataPath+mcpPath+"/{device}/{$}", s.resourceMetadata)
	register, authorize := http.Handler(http.HandlerFunc(s.register)), http.Handler(http.HandlerFunc(s.authorize))
	if cfg.LimitRegister != nil {
		register = cfg.LimitRegister(register)
	}
	if cfg.LimitAuthorize != nil {
		authorize = cfg.LimitAuthorize(authorize)
	}
	for _, prefix := range []string{"", LegacyPrefix} {
		mux.Handle("GET "+prefix+AuthorizePath, authorize)
		mux.Handle("POST "+prefix+RegisterPath, register)
		mux.HandleFunc("POST "+prefix+TokenPath, s.token)
		mux.HandleFunc("POST "+prefix+RevokePath, s.revoke)
	}
	s.handler = cors(mux)
	return s, nil
}

// EndpointPaths are the paths the endpoints answer at, besides the
// metadata's: the relay routes each here.
func EndpointPaths() []string {
	var out []string
	for _, prefix := range []string{"", LegacyPrefix} {
		for _, p := range []string{AuthorizePath, TokenPath, RegisterPath, RevokePath} {
			out = append(out, prefix+p)
		}
	}
	return out
}

// Handler serves the metadata and /oauth/ endpoints.
func (s *Server) Handler() http.Handler { return s.handler }

// Issuer is the relay's issuer identifier, which the authorization
// response's iss names (RFC 9207).
func (s *Server) Issuer() string { return s.cfg.PublicURL }

// Resource is the MCP URL of the endpoint for device ("" for /mcp): what
// an OAuth connection's tokens are bound to.
func (s *Server) Resource(device string) string {
	if device == "" {
		return s.cfg.PublicURL + mcpPath
	}
	return s.cfg.PublicURL + mcpPath + "/" + url.PathEscape(device)
}

// Challenge is the WWW-Authenticate value of a 401 from the endpoint for
// device ("" for /mcp), reached with a trailing '/' when slash is set;
// errCode, when set, is RFC 6750's error (a token that is revoked,
// expired or for another resource is invalid_token). It names the scopes
// a client may ask for, as MCP's authorization (2025-11-25) asks.
func (s *Server) Challenge(device string, slash bool, errCode string) string {
	meta := s.cfg.PublicURL + ResourceMetadataPath + mcpPath
	if device != "" {
		meta += "/" + url.PathEscape(device)
	}
	if slash {
		meta += "/"
	}
	v := "Bearer "
	if errCode != "" {
		v += `error="` + errCode + `", `
	}
	return v + `resource_metadata="` + meta + `", scope="` + strings.Join(ScopesSupported(), " ") + `"`
}

// ScopesSupported are the scopes the metadata lists and a 401 names: the
// presets, and offline_access, which revision 2026-07-28 of MCP's
// authorization has a client ask for to be given a refresh token. The
// relay gives every connection one anyway.
func ScopesSupported() []string { return append(authz.PresetNames(), ScopeOfflineAccess) }

// ScopeOfflineAccess is OpenID Connect's scope for a refresh token.
const ScopeOfflineAccess = "offline_access"

// resourceOf reports the device a resource URL names ("" for /mcp), or
// false when it is none of this relay's MCP URLs. A URL as a person typed
// it, with a trailing '/', names the same resource (claude.ai sends the
// typed URL as it is).
func (s *Server) resourceOf(resource string) (string, bool) {
	base := s.cfg.PublicURL + mcpPath
	if resource == base || resource == base+"/" {
		return "", true
	}
	dev, ok := strings.CutPrefix(resource, base+"/")
	dev = strings.TrimSuffix(dev, "/")
	if !ok || !validDevice(dev) {
		return "", false
	}
	return dev, true
}

// canonicalResource is the resource a resource URL names, in the form a
// token is bound to (no trailing '/'), or false.
func (s *Server) canonicalResource(resource string) (string, bool) {
	dev, ok := s.resourceOf(resource)
	if !ok {
		return "", false
	}
	return s.Resource(dev), true
}

// audit queues a row of the sign-in's steps.
func (s *Server) audit(at time.Time, tok *store.Token, tokenID, tool, code string) {
	if s.cfg.Audit == nil {
		return
	}
	e := store.AuditEntry{At: at, TokenID: tokenID, Tool: tool, Outcome: store.AuditOK}
	if tok != nil {
		e.Principal, e.TokenID = tok.Principal, tok.ID
	}
	if code != "" {
		e.Outcome, e.Code = store.AuditFailed, code
	}
	s.cfg.Audit(e)
}

// cors lets browser-based clients read the metadata and call the
// registration, token and revocation endpoints: none of them rely on a
// cookie, so any origin may.
func cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != AuthorizePath && r.URL.Path != LegacyPrefix+AuthorizePath {
			w.Header().Set("Access-Control-Allow-Origin", "*")
			if r.Method == http.MethodOptions {
				w.Header().Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
				w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type, MCP-Protocol-Version")
				w.Header().Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
