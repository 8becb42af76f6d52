package signin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// OIDCConfig is the team's OpenID provider and who it may sign in.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL; its discovery document and
	// keys are fetched from it on first use.
	Issuer string
	// ClientID and ClientSecret are the relay's registration there.
	ClientID, ClientSecret string
	// Rules say who may sign in.
	Rules Rules
	// Client makes the requests to the provider; nil is
	// http.DefaultClient's transport with exchangeTimeout.
	Client *http.Client
}

const (
	// stateKindOIDC names an SSO sign-in under way in the state.
	stateKindOIDC = "oidc"
	// exchangeTimeout bounds each request to the identity provider.
	exchangeTimeout = 10 * time.Second
	// CallbackPath is where the provider sends the browser back to.
	CallbackPath = "/panel/login/sso/callback"
)

// oidcState is what an SSO sign-in keeps while the browser is away.
type oidcState struct {
	State    string `json:"state"`
	Nonce    string `json:"nonce"`
	Verifier string `json:"verifier"`
	Next     string `json:"next"`
}

// oidcClient is the relay as the provider's client. The provider is
// discovered on first use, and again after a failure, so a relay starts
// while its provider is down and signs people in once it is up.
type oidcClient struct {
	cfg      OIDCConfig
	redirect string

	mu       sync.Mutex
	provider *oidc.Provider
}

func (c *oidcClient) context(ctx context.Context) context.Context {
	hc := c.cfg.Client
	if hc == nil {
		hc = &http.Client{Timeout: exchangeTimeout}
	}
	return oidc.ClientContext(ctx, hc)
}

// discover returns the provider, fetching its discovery document once.
func (c *oidcClient) discover(ctx context.Context) (*oidc.Provider, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.provider != nil {
		return c.provider, nil
	}
	p, err := oidc.NewProvider(c.context(ctx), c.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discover the identity provider: %w", err)
	}
	c.provider = p
	return p, nil
}

func (c *oidcClient) oauth2(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{ClientID: c.cfg.ClientID, ClientSecret: c.cfg.ClientSecret, Endpoint: p.Endpoint(),
		RedirectURL: c.redirect, Scopes: []string{oidc.ScopeOpenID, "email", "profile"}}
}

// BeginSSO starts an SSO sign-in that continues at next: it returns the
// provider's authorization URL to send the browser to, and the secret
// naming the sign-in under way, for a cookie that comes back with the
// browser.
func (s *SignIn) BeginSSO(ctx context.Context, next string) (to, cookie string, err error) {
	if s.oidc == nil {
		return "", "", ErrRefused
	}
	p, err := s.oidc.discover(ctx)
	if err != nil {
		return "", "", err
	}
	st := oidcState{State: random(), Nonce: random(), Verifier: oauth2.GenerateVerifier(), Next: next}
	data, _ := json.Marshal(st)
	cookie, err = s.cfg.State.PutSignInState(stateKindOIDC, data, s.now())
	if err != nil {
		return "", "", err
	}
	to = s.oidc.oauth2(p).AuthCodeURL(st.State, oidc.Nonce(st.Nonce), oauth2.S256ChallengeOption(st.Verifier))
	return to, cookie, nil
}

// FinishSSO completes the SSO sign-in cookie names with the provider's
// answer (the callback's query): the state must be the one sent, the code
// is exchanged with the PKCE verifier, and the ID token must be signed by
// the provider's published keys, for this client, unexpired and carry the
// nonce sent; its verified e-mail address and groups must pass the rules.
// It returns the admin, their new session and where to continue; every
// refusal is ErrRefused, wrapping what went wrong for the local log.
func (s *SignIn) FinishSSO(ctx context.Context, cookie string, q url.Values) (admin, session, next string, err error) {
	if s.oidc == nil {
		return "", "", "", ErrRefused
	}
	data, err := s.cfg.State.TakeSignInState(cookie, stateKindOIDC, s.now())
	if err != nil {
		return "", "", "", refused("no sign-in under way", err)
	}
	var st oidcState
	if err := json.Unmarshal(data, &st); err != nil {
		return "", "", "", refused("sign-in state", err)
	}
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(st.State)) != 1 {
		return "", "", "", refused("state", nil)
	}
	if q.Get("error") != "" || q.Get("code") == "" {
		return "", "", "", refused("the provider answered no code", nil)
	}
	p, err := s.oidc.discover(ctx)
	if err != nil {
		return "", "", "", refused("discovery", err)
	}
	ctx = s.oidc.context(ctx)
	tok, err := s.oidc.oauth2(p).Exchange(ctx, q.Get("code"), oauth2.VerifierOption(st.Verifier))
	if err != nil {
		return "", "", "", refused("code exchange", err)
	}
	email, err := s.verifyIDToken(ctx, p, tok, st.Nonce)
	if err != nil {
		return "", "", "", err
	}
	admin, _ = AdminName(email)
	session, err = s.cfg.State.SSOSignIn(admin, s.now())
	if err != nil {
		return "", "", "", refused("session", err)
	}
	return admin, session, st.Next, nil
}

// identity is what decides whether a person may sign in.
type identity struct {
	Subject  string   `json:"sub"`
	Email    string   `json:"email"`
	Verified *bool    `json:"email_verified"`
	Groups   []string `json:"groups"`
}

// verifyIDToken checks the ID token that came with tok (issuer, audience,
// expiry, signature, nonce) and the rules, and returns the person's
// verified e-mail address. A provider that puts no e-mail address in its
// ID tokens is asked at its UserInfo endpoint, for the same subject.
func (s *SignIn) verifyIDToken(ctx context.Context, p *oidc.Provider, tok *oauth2.Token, nonce string) (string, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return "", refused("no ID token", nil)
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: s.oidc.cfg.ClientID, Now: s.now}).Verify(ctx, raw)
	if err != nil {
		return "", refused("ID token", err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 {
		return "", refused("nonce", nil)
	}
	var who identity
	if err := idt.Claims(&who); err != nil {
		return "", refused("claims", err)
	}
	if who.Email == "" && tok.AccessToken != "" {
		info, err := p.UserInfo(ctx, oauth2.StaticTokenSource(tok))
		if err != nil {
			return "", refused("userinfo", err)
		}
		var more identity
		if err := info.Claims(&more); err != nil || more.Subject != idt.Subject {
			return "", refused("userinfo of another subject", err)
		}
		who = more
	}
	if who.Verified == nil || !*who.Verified {
		return "", refused("e-mail address not verified", nil)
	}
	if !s.oidc.cfg.Rules.Allow(who.Email, who.Groups) {
		return "", refused("not allowed by the rules", nil)
	}
	return who.Email, nil
}

// ErrRefused is every sign-in refusal, whatever went wrong.
var ErrRefused = errors.New("sign-in refused")

// refusal is a sign-in refused, with why, for the local log only.
type refusal struct {
	why   string
	cause error
}

func (r *refusal) Error() string {
	if r.cause != nil {
		return "sign-in refused: " + r.why + ": " + r.cause.Error()
	}
	return "sign-in refused: " + r.why
}

func (r *refusal) Is(target error) bool { return target == ErrRefused }
func (r *refusal) Unwrap() error        { return r.cause }

func refused(why string, cause error) error { return &refusal{why: why, cause: cause} }

// Why is what refused a sign-in, without its cause's text (which may
// quote the provider): for the relay's log.
func Why(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.why
	}
	return "refused"
}
