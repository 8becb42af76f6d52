package oauth

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/namechars"
	"github.com/commandcore/commandcore/internal/relay/oauth/cimd"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// client is what the authorization endpoint knows of a client.
type client struct {
	name         string
	redirectURIs []string
}

// findClient returns the client a client_id names: a dynamic
// registration's, or the metadata document at that URL. Errors are coded:
// NotFound or InvalidArgument refuse the client, others are the state's or
// the fetch's failure.
func (s *Server) findClient(r *http.Request, id string) (*client, error) {
	if store.IsRegisteredClientID(id) {
		c, err := s.cfg.State.RegisteredClient(id, s.cfg.Now())
		if err != nil {
			return nil, err
		}
		return &client{name: c.Name, redirectURIs: c.RedirectURIs}, nil
	}
	if !cimd.IsClientIDURL(id) {
		return nil, errcode.New(errcode.NotFound, "no such client")
	}
	d, err := s.cfg.Clients.Get(r.Context(), id)
	if err != nil {
		return nil, err
	}
	return &client{name: d.ClientName, redirectURIs: d.RedirectURIs}, nil
}

// authorize checks an authorization request and sends the browser to the
// consent page. Until the client and its redirect URI are known good,
// errors are a page; after, they go back to the client (RFC 6749 4.1.2.1).
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id, redirect := q.Get("client_id"), q.Get("redirect_uri")
	switch {
	case len(q["client_id"]) != 1 || id == "":
		writeErrorPage(w, http.StatusBadRequest, "The request names no client, or more than one.")
		return
	case len(q["redirect_uri"]) != 1 || redirect == "":
		writeErrorPage(w, http.StatusBadRequest, "The request names no redirect URI, or more than one.")
		return
	}
	c, err := s.findClient(r, id)
	switch {
	case errcode.Is(err, errcode.NotFound):
		writeErrorPage(w, http.StatusBadRequest, "This client is not known to the relay: it never registered, or its registration expired.")
		return
	case errcode.Is(err, errcode.InvalidArgument):
		writeErrorPage(w, http.StatusBadRequest, "This client's metadata document was refused: "+errcode.From(err).Message+".")
		return
	case err != nil:
		writeErrorPage(w, http.StatusServiceUnavailable, "The relay cannot check this client now; try again shortly.")
		return
	}
	if !matchRedirect(c.redirectURIs, redirect) {
		writeErrorPage(w, http.StatusBadRequest, "This redirect URI is not one the client registered.")
		return
	}
	state := q.Get("state")
	fail := func(code, description string) {
		u := ResponseURL(redirect, s.cfg.PublicURL, state, url.Values{"error": {code}, "error_description": {description}})
		http.Redirect(w, r, u, http.StatusFound)
	}
	for k, vs := range q {
		if len(vs) > 1 {
			fail(ErrInvalidRequest, "a parameter is repeated: "+paramName(k))
			return
		}
	}
	if !namechars.Printable(state, limits.OAuthStateMaxBytes) {
		// Not returned: it is not text the relay keeps.
		state = ""
		fail(ErrInvalidRequest, "state is not printable text within bounds")
		return
	}
	resource, ok := q.Get("resource"), false
	if resource != "" {
		resource, ok = s.canonicalResource(resource)
	}
	// Scope names the relay does not know (offline_access, openid, a
	// client's own) are left out, never refused: the consent page decides.
	scope := strings.Join(authz.ParsePresetScope(q.Get("scope")), " ")
	switch {
	case q.Get("response_type") != "code":
		fail(ErrUnsupportedResponseType, "response_type must be code")
	case q.Get("code_challenge") == "":
		fail(ErrInvalidRequest, "a PKCE code_challenge (S256) is required")
	case q.Get("code_challenge_method") != "S256":
		fail(ErrInvalidRequest, "code_challenge_method must be S256")
	case !validChallenge(q.Get("code_challenge")):
		fail(ErrInvalidRequest, "code_challenge must be an S256 challenge: 43 characters of base64url")
	case q.Get("resource") == "":
		fail(ErrInvalidRequest, "resource is required: the MCP URL the client connects to")
	case !ok:
		fail(ErrInvalidTarget, "resource is not one of this relay's MCP URLs")
	default:
		reqID, err := s.cfg.State.CreateAuthRequest(store.AuthRequest{ClientID: id, ClientName: c.name, RedirectURI: redirect,
			State: state, Challenge: q.Get("code_challenge"), Resource: resource, Scope: scope, Source: s.cfg.Source(r)}, s.cfg.Now())
		switch {
		case errcode.Is(err, errcode.InvalidArgument):
			fail(ErrInvalidRequest, "the request's parameters are not within the relay's bounds")
		case errcode.Is(err, errcode.RateLimited):
			fail(ErrTemporarilyUnavailable, "too many authorization requests from this address or client wait for a person; try again in a few minutes")
		case err != nil:
			fail(ErrTemporarilyUnavailable, "the relay's state is unavailable; try again shortly")
		default:
			w.Header().Set("Cache-Control", "no-store")
			http.Redirect(w, r, s.consent+url.PathEscape(reqID), http.StatusFound)
		}
	}
}

// paramName is a parameter's name as an error may repeat it: one the
// relay knows, else none.
func paramName(k string) string {
	switch k {
	case "client_id", "redirect_uri", "response_type", "code_challenge", "code_challenge_method", "state", "resource", "scope":
		return k
	}
	return "(another)"
}

// validChallenge reports whether c is an S256 challenge: base64url of 32
// bytes, unpadded.
func validChallenge(c string) bool {
	return len(c) == 43 && strings.Trim(c, b64chars) == ""
}

const b64chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
