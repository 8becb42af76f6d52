package oauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/oauth/cimd"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// The grant types the token endpoint serves.
const (
	grantCode    = "authorization_code"
	grantRefresh = "refresh_token"
)

// tokenResponse is RFC 6749 5.1's.
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token"`
	Scope        string `json:"scope,omitempty"`
}

// ErrForm refuses a request body that is not a form the endpoints read.
var ErrForm = errors.New("the body is not an application/x-www-form-urlencoded form within bounds, each parameter once")

// ParseForm reads an OAuth request's form body: at most
// limits.OAuthMaxFormBytes, each parameter once (RFC 6749 3.1).
func ParseForm(body []byte) (url.Values, error) {
	if len(body) > limits.OAuthMaxFormBytes {
		return nil, ErrForm
	}
	v, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, ErrForm
	}
	for _, vs := range v {
		if len(vs) != 1 {
			return nil, ErrForm
		}
	}
	return v, nil
}

// readForm reads r's form body, or answers invalid_request and returns
// nil.
func readForm(w http.ResponseWriter, r *http.Request) url.Values {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/x-www-form-urlencoded" {
		writeOAuthError(w, ErrInvalidRequest, "the body must be application/x-www-form-urlencoded")
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limits.OAuthMaxFormBytes+1))
	if err != nil {
		writeOAuthError(w, ErrInvalidRequest, "the body could not be read")
		return nil
	}
	v, err := ParseForm(body)
	if err != nil {
		writeOAuthError(w, ErrInvalidRequest, ErrForm.Error())
		return nil
	}
	return v
}

// clientID is the public client a token or revocation request names: its
// client_id parameter, or HTTP Basic's user with an empty password. A
// secret is refused: the relay issues none.
func clientID(r *http.Request, form url.Values) (string, bool) {
	id := form.Get("client_id")
	if user, pass, ok := r.BasicAuth(); ok {
		if pass != "" || id != "" && id != user {
			return "", false
		}
		id, _ = url.QueryUnescape(user)
	}
	if form.Get("client_secret") != "" {
		return "", false
	}
	return id, id != "" && (store.IsRegisteredClientID(id) || cimd.IsClientIDURL(id))
}

// refuseClient answers invalid_client; a client that tried HTTP
// authentication is told the scheme (RFC 6749 5.2).
func refuseClient(w http.ResponseWriter, r *http.Request, description string) {
	if r.Header.Get("Authorization") != "" {
		w.Header().Set("WWW-Authenticate", `Basic realm="commandcore-relay"`)
	}
	writeOAuthError(w, ErrInvalidClient, description)
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	form := readForm(w, r)
	if form == nil {
		return
	}
	id, ok := clientID(r, form)
	if !ok {
		refuseClient(w, r, "the request names no public client (client_id, and no secret)")
		return
	}
	resource := form.Get("resource")
	if resource != "" {
		if resource, ok = s.canonicalResource(resource); !ok {
			writeOAuthError(w, ErrInvalidTarget, "resource is not one of this relay's MCP URLs")
			return
		}
	}
	now := s.cfg.Now()
	var (
		tok  *store.Token
		pair store.TokenPair
		err  error
	)
	switch form.Get("grant_type") {
	case grantCode:
		tok, pair, err = s.redeem(form, id, resource, now)
		if errors.Is(err, store.ErrCodeReused) {
			s.audit(now, tok, "", AuditToken, AuditReused)
		} else if err == nil {
			s.audit(now, tok, "", AuditToken, "")
		}
	case grantRefresh:
		refresh := form.Get("refresh_token")
		tok, pair, err = s.cfg.State.RefreshConnection(refresh, id, now)
		switch {
		case errors.Is(err, store.ErrRefreshReused):
			s.audit(now, tok, "", AuditRefresh, AuditReused)
		case err == nil && resource != "" && resource != tok.Resource:
			// Spent all the same: a client that asks for another resource
			// starts over.
			writeOAuthError(w, ErrInvalidTarget, "the connection is for another resource")
			return
		case err == nil:
			s.audit(now, tok, "", AuditRefresh, "")
		}
	case "":
		writeOAuthError(w, ErrInvalidRequest, "grant_type is required")
		return
	default:
		writeOAuthError(w, ErrUnsupportedGrantType, "grant_type is authorization_code or refresh_token")
		return
	}
	if err != nil {
		var oe *oauthError
		switch {
		case errors.As(err, &oe):
			writeOAuthError(w, oe.code, oe.description)
		case errcode.Is(err, errcode.PermissionDenied), errcode.Is(err, errcode.NotFound), errcode.Is(err, errcode.InvalidArgument):
			writeOAuthError(w, ErrInvalidGrant, errcode.From(err).Message)
		default:
			writeOAuthError(w, ErrTemporarilyUnavailable, "the relay's state is unavailable; try again shortly")
		}
		return
	}
	writeJSON(w, http.StatusOK, tokenResponse{
		AccessToken: pair.Access, TokenType: "Bearer", ExpiresIn: max(1, int64(pair.AccessExpiresAt.Sub(now)/time.Second)),
		RefreshToken: pair.Refresh, Scope: grantedScope(tok.Tools),
	})
}

// oauthError is a refusal verify decides, with its own code.
type oauthError struct{ code, description string }

func (e *oauthError) Error() string { return e.code + ": " + e.description }

// redeem spends a code: the client, the redirect URI, the resource (as
// canonicalResource has it, or "") and the PKCE verifier must be the
// authorization request's.
func (s *Server) redeem(form url.Values, id, resource string, now time.Time) (*store.Token, store.TokenPair, error) {
	verifier, redirect := form.Get("code_verifier"), form.Get("redirect_uri")
	if !validVerifier(verifier) {
		return nil, store.TokenPair{}, &oauthError{ErrInvalidRequest, "code_verifier (PKCE, 43 to 128 characters) is required"}
	}
	if form.Get("code") == "" || redirect == "" {
		return nil, store.TokenPair{}, &oauthError{ErrInvalidRequest, "code and redirect_uri are required"}
	}
	return s.cfg.State.RedeemAuthCode(form.Get("code"), func(c *store.AuthCode) error {
		sum := sha256.Sum256([]byte(verifier))
		challenge := base64.RawURLEncoding.EncodeToString(sum[:])
		switch {
		case c.ClientID != id:
			return &oauthError{ErrInvalidGrant, "the code was issued to another client"}
		case c.RedirectURI != redirect:
			return &oauthError{ErrInvalidGrant, "redirect_uri is not the authorization request's"}
		case resource != "" && resource != c.Resource:
			return &oauthError{ErrInvalidTarget, "resource is not the authorization request's"}
		case subtle.ConstantTimeCompare([]byte(challenge), []byte(c.Challenge)) != 1:
			return &oauthError{ErrInvalidGrant, "code_verifier does not match the code challenge"}
		}
		return nil
	}, now)
}

// validVerifier reports whether v is a PKCE code verifier (RFC 7636 4.1).
func validVerifier(v string) bool {
	return len(v) >= 43 && len(v) <= 128 && strings.Trim(v, b64chars+".~") == ""
}

// grantedScope names the presets a connection's tools hold whole: what a
// client asked for may be more, or less, than the person chose.
func grantedScope(tools []string) string {
	var out []string
	for _, p := range authz.Presets {
		all := true
		for _, t := range p.Tools {
			if !authz.MatchScope(tools, t) {
				all = false
				break
			}
		}
		if all {
			out = append(out, p.Name)
		}
	}
	return strings.Join(out, " ")
}

// revoke is RFC 7009's: either token ends its connection; a token that is
// none is no error.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	form := readForm(w, r)
	if form == nil {
		return
	}
	// The client_id is optional here: holding the token is what counts,
	// and some clients revoke without naming themselves.
	if _, pass, ok := r.BasicAuth(); ok && pass != "" || form.Get("client_secret") != "" {
		refuseClient(w, r, "the relay's clients are public: no secret")
		return
	}
	tok := form.Get("token")
	if tok == "" {
		writeOAuthError(w, ErrInvalidRequest, "token is required")
		return
	}
	now := s.cfg.Now()
	revoked, err := s.cfg.State.RevokeOAuthToken(tok, now)
	if err != nil {
		writeOAuthError(w, ErrTemporarilyUnavailable, "the relay's state is unavailable; try again shortly")
		return
	}
	if revoked != nil {
		s.audit(now, revoked, "", AuditRevoke, "")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}
