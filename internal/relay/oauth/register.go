package oauth

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/namechars"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// registration is what the relay reads of an RFC 7591 registration
// request; members it does not use are ignored, as the RFC asks. What a
// client asks of its authentication, grant and response types is
// replaced, as RFC 7591 3.2.1 allows: every client is public (claude.ai
// asks for client_secret_post, and does without when the answer says
// none), with the code and refresh grants.
type registration struct {
	RedirectURIs []string `json:"redirect_uris"`
	ClientName   string   `json:"client_name"`
}

// registered is the registration response (RFC 7591 3.2.1).
type registered struct {
	ClientID                string   `json:"client_id"`
	ClientIDIssuedAt        int64    `json:"client_id_issued_at"`
	ClientName              string   `json:"client_name,omitempty"`
	RedirectURIs            []string `json:"redirect_uris"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
}

// registrationError is a refused registration: its RFC 7591 code and a
// description that repeats nothing the client sent.
type registrationError struct{ code, description string }

// DecodeRegistration reads a registration request's body into the client
// it registers: a public client (no secret) with 1 to
// limits.OAuthMaxRedirectURIs redirect URIs, each ValidRedirectURI. A
// name that cannot be shown as it is is dropped.
func DecodeRegistration(body []byte) (*store.OAuthClient, *registrationError) {
	if len(body) > limits.OAuthMaxFormBytes {
		return nil, &registrationError{ErrInvalidClientMetadata, "the registration is too large"}
	}
	var reg registration
	if err := json.Unmarshal(body, &reg); err != nil {
		return nil, &registrationError{ErrInvalidClientMetadata, "the registration is not a JSON object of RFC 7591's types"}
	}
	if len(reg.RedirectURIs) == 0 || len(reg.RedirectURIs) > limits.OAuthMaxRedirectURIs {
		return nil, &registrationError{ErrInvalidRedirectURI, fmt.Sprintf("a client registers 1 to %d redirect_uris", limits.OAuthMaxRedirectURIs)}
	}
	for _, u := range reg.RedirectURIs {
		if !ValidRedirectURI(u) {
			return nil, &registrationError{ErrInvalidRedirectURI, "a redirect URI is HTTPS, HTTP to a loopback address, or a native app's own scheme, without fragment"}
		}
	}
	name := strings.TrimSpace(reg.ClientName)
	if !namechars.Printable(name, store.MaxClientNameBytes) {
		name = ""
	}
	uris := slices.Compact(slices.Clone(reg.RedirectURIs))
	return &store.OAuthClient{Name: name, RedirectURIs: uris}, nil
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, limits.OAuthMaxFormBytes+1))
	if err != nil {
		writeOAuthError(w, ErrInvalidClientMetadata, "the registration could not be read")
		return
	}
	c, rerr := DecodeRegistration(body)
	if rerr != nil {
		writeOAuthError(w, rerr.code, rerr.description)
		return
	}
	out, err := s.cfg.State.RegisterClient(*c, s.cfg.Now())
	switch {
	case errcode.Is(err, errcode.InvalidArgument):
		writeOAuthError(w, ErrInvalidClientMetadata, "the registration is not within the relay's bounds")
		return
	case errcode.Is(err, errcode.Unavailable):
		writeOAuthError(w, ErrTemporarilyUnavailable, errcode.From(err).Message)
		return
	case err != nil:
		writeOAuthError(w, ErrTemporarilyUnavailable, "the relay's state is unavailable; try again shortly")
		return
	}
	writeJSON(w, http.StatusCreated, registered{
		ClientID: out.ID, ClientIDIssuedAt: out.CreatedAt.Unix(), ClientName: out.Name, RedirectURIs: out.RedirectURIs,
		GrantTypes: []string{grantCode, grantRefresh}, ResponseTypes: []string{"code"}, TokenEndpointAuthMethod: "none",
	})
}
