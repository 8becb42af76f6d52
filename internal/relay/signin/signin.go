// Package signin is how a person signs in to the relay's panel besides a
// one-time code: with the team's identity provider (OpenID Connect: the
// authorization code flow with PKCE, the ID token verified against the
// provider's published keys, and rules on who may come in) and with
// passkeys (WebAuthn: discoverable credentials, user verification
// required). What a sign-in keeps while it is under way lives in the
// relay's state, named by a cookie's secret and taken once, so any
// replica finishes what another began; passkeys live there too, so any
// replica verifies them. The panel serves the pages and sets the cookies.
package signin

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/commandcore/commandcore/internal/relay/store"
)

// Config is what sign-in needs.
type Config struct {
	State store.State
	// PanelURL is the panel's public origin (scheme, host and port, as
	// browsers reach it): the SSO callback is built from it, and it is
	// the passkeys' origin, its host their relying party ID. Passkeys
	// need a host name (WebAuthn allows no IP address); a panel reached
	// by address offers none.
	PanelURL *url.URL
	// OIDC, when set, signs people in with the team's identity provider.
	OIDC *OIDCConfig
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// SignIn is the panel's ways in besides a code.
type SignIn struct {
	cfg      Config
	oidc     *oidcClient
	webauthn *webauthn.WebAuthn
}

// New returns the sign-in methods cfg makes possible.
func New(cfg Config) (*SignIn, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.PanelURL == nil || cfg.PanelURL.Host == "" || (cfg.PanelURL.Scheme != "http" && cfg.PanelURL.Scheme != "https") {
		return nil, fmt.Errorf("the panel's public URL must be an http or https origin")
	}
	origin := cfg.PanelURL.Scheme + "://" + cfg.PanelURL.Host
	s := &SignIn{cfg: cfg}
	if cfg.OIDC != nil {
		if cfg.OIDC.Issuer == "" || cfg.OIDC.ClientID == "" {
			return nil, fmt.Errorf("SSO needs an issuer and a client ID")
		}
		s.oidc = &oidcClient{cfg: *cfg.OIDC, redirect: origin + CallbackPath}
	}
	if host := cfg.PanelURL.Hostname(); net.ParseIP(host) == nil && !strings.HasSuffix(host, ".") {
		w, err := webauthn.New(&webauthn.Config{
			RPID: host, RPDisplayName: "CommandCore relay", RPOrigins: []string{origin},
			AuthenticatorSelection: protocol.AuthenticatorSelection{
				ResidentKey: protocol.ResidentKeyRequirementRequired, RequireResidentKey: protocol.ResidentKeyRequired(),
				UserVerification: protocol.VerificationRequired,
			},
		})
		if err != nil {
			return nil, fmt.Errorf("passkeys: %w", err)
		}
		s.webauthn = w
	}
	return s, nil
}

// Host is the panel's public host and port, as browsers reach it:
// passkeys are made and used only there.
func (s *SignIn) Host() string { return s.cfg.PanelURL.Host }

// Origin is the panel's public origin.
func (s *SignIn) Origin() string { return s.cfg.PanelURL.Scheme + "://" + s.cfg.PanelURL.Host }

// SSO reports whether the team's identity provider signs people in.
func (s *SignIn) SSO() bool { return s != nil && s.oidc != nil }

// Passkeys reports whether this panel's address can hold passkeys.
func (s *SignIn) Passkeys() bool { return s != nil && s.webauthn != nil }

func (s *SignIn) now() time.Time { return s.cfg.Now() }

// random is 32 random bytes in base64url: a state, a nonce.
func random() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
