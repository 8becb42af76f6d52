package signin_test

import (
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2"

	"github.com/commandcore/commandcore/internal/relay/panel"
	"github.com/commandcore/commandcore/internal/relay/signin"
	"github.com/commandcore/commandcore/internal/relay/signin/oidctest"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// The identity provider of these tests is a real OpenID provider
// (oidctest) knowing the relay's client and another application's.
const (
	allowed    = oidctest.Allowed
	allowedAs  = "test-user_at_zitadel.ch"
	password   = oidctest.Password
	clientID   = "relay"
	secret     = "relay-secret"
	otherID    = "other-app"
	otherRedir = "http://127.0.0.1:9/cb"
)

// provider starts the OpenID provider, knowing the relay's client (its
// callback on panelURL) and another application's.
func provider(t *testing.T, panelURL string) (issuer string) {
	return oidctest.Start(t, oidctest.Client{ID: clientID, Secret: secret, RedirectURI: panelURL + signin.CallbackPath},
		oidctest.Client{ID: otherID, Secret: "other-secret", RedirectURI: otherRedir})
}

// relay is a panel with SSO over a fresh state, and what it audited.
type relay struct {
	url    string
	issuer string
	state  store.State
	sso    *signin.SignIn
	mu     sync.Mutex
	audits []store.AuditEntry
}

// user is the provider's test-user: named after the issuer's host.
func (r *relay) user() string { return oidctest.Username(r.issuer) }

func newRelay(t *testing.T, rules string, now func() time.Time) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{url: "http://" + ln.Addr().String()}
	issuer := provider(t, r.url)
	r.issuer = issuer
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r.state = st
	allow, err := signin.ParseRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(r.url)
	r.sso, err = signin.New(signin.Config{State: st, PanelURL: u, Now: now,
		OIDC: &signin.OIDCConfig{Issuer: issuer, ClientID: clientID, ClientSecret: secret, Rules: allow}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := panel.New(panel.Config{State: st, SignIn: r.sso, Log: log.New(testLog{t}, "", 0), Audit: func(e store.AuditEntry) {
		r.mu.Lock()
		r.audits = append(r.audits, e)
		r.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: p.Handler()}}
	srv.Start()
	t.Cleanup(srv.Close)
	return r
}

// testLog sends the panel's log lines to the test's.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// browser is a person's browser: it keeps cookies and follows redirects,
// except to stop, when stopAt is set, before a request to that path.
type browser struct {
	*http.Client
	t      *testing.T
	stopAt string
}

func newBrowser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	b := &browser{Client: &http.Client{Jar: jar}, t: t}
	b.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if b.stopAt != "" && (req.URL.Path == b.stopAt || req.URL.String() == b.stopAt) {
			return http.ErrUseLastResponse
		}
		return nil
	}
	return b
}

func (b *browser) read(resp *http.Response, err error) (*http.Response, string) {
	b.t.Helper()
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// toProvider starts the SSO sign-in at the relay and returns the ID of
// the provider's login request the browser lands on.
func (b *browser) toProvider(t *testing.T, relayURL, next string) (providerURL, authRequest string) {
	t.Helper()
	resp, page := b.read(b.PostForm(relayURL+panel.LoginPath+"/sso", url.Values{"next": {next}}))
	id := resp.Request.URL.Query().Get("authRequestID")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("SSO start landed on %s: %d %.200s", resp.Request.URL, resp.StatusCode, page)
	}
	return resp.Request.URL.Scheme + "://" + resp.Request.URL.Host, id
}

// logIn signs in at the provider as user and follows it back.
func (b *browser) logIn(t *testing.T, providerURL, authRequest, user string) (*http.Response, string) {
	t.Helper()
	return b.read(b.PostForm(providerURL+"/login/username", url.Values{"username": {user}, "password": {password}, "id": {authRequest}}))
}

func (b *browser) hasSession(relayURL string) bool {
	u, _ := url.Parse(relayURL + panel.Prefix)
	for _, c := range b.Jar.Cookies(u) {
		if c.Name == panel.CookieName && c.Value != "" {
			return true
		}
	}
	return false
}

const refusal = "invalid, used or expired, or not allowed"

// TestSSOSignsAnAllowedPersonIn: the sign-in page offers SSO; a person
// the rules allow signs in at the provider and lands on the Overview as
// the admin named by their e-mail, made on first sign-in and audited; a
// person outside the rules gets the uniform refusal and no session.
func TestSSOSignsAnAllowedPersonIn(t *testing.T) {
	r := newRelay(t, "@zitadel.ch, group:nobody", nil)
	r2 := newRelay(t, allowed+",group:admins", nil)

	b := newBrowser(t)
	_, page := b.read(b.Get(r2.url + panel.LoginPath))
	if !strings.Contains(page, "Sign in with SSO") || strings.Contains(page, "Sign in with a passkey") {
		t.Fatalf("the sign-in page offers: %s", page)
	}
	prov, id := b.toProvider(t, r2.url, "/panel/")
	resp, page := b.logIn(t, prov, id, r2.user())
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != signin.CallbackPath || !strings.Contains(page, `content="0;url=/panel/"`) {
		t.Fatalf("back from the provider: %s %d %s", resp.Request.URL, resp.StatusCode, page)
	}
	resp, page = b.read(b.Get(r2.url + panel.Prefix))
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "<h1>Overview</h1>") || !strings.Contains(page, allowedAs) {
		t.Fatalf("the Overview after SSO: %d %s", resp.StatusCode, page)
	}
	admins, _ := r2.state.Admins(time.Now())
	if len(admins) != 1 || admins[0].Name != allowedAs {
		t.Fatalf("admins after SSO: %+v", admins)
	}
	r2.mu.Lock()
	if len(r2.audits) != 1 || r2.audits[0].Tool != "panel.sign_in_sso" || r2.audits[0].Principal != "admin:"+allowedAs {
		t.Fatalf("audited %+v", r2.audits)
	}
	r2.mu.Unlock()

	// test-user2 is outside r2's rules.
	b = newBrowser(t)
	prov, id = b.toProvider(t, r2.url, "/panel/")
	resp, page = b.logIn(t, prov, id, "test-user2")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(page, refusal) || b.hasSession(r2.url) {
		t.Fatalf("a person outside the rules: %d %s", resp.StatusCode, page)
	}
	if admins, _ := r2.state.Admins(time.Now()); len(admins) != 1 {
		t.Fatalf("a refused person became an admin: %+v", admins)
	}

	// A domain rule lets both in. A person sent to sign in from a page
	// of the panel comes back to it; a return path the panel does not
	// follow is the Overview.
	b = newBrowser(t)
	back := panel.SecretPath + "0123456789abcdef"
	prov, id = b.toProvider(t, r.url, back)
	if resp, page := b.logIn(t, prov, id, "test-user2"); resp.StatusCode != http.StatusOK || !b.hasSession(r.url) ||
		!strings.Contains(page, `content="0;url=`+back+`"`) {
		t.Fatalf("a person at an allowed domain, back to %s: %d %s", back, resp.StatusCode, page)
	}
	// An app's request waiting for consent: the person signs in by SSO
	// and comes back to it.
	b = newBrowser(t)
	consent := panel.ConsentPath + "req_0123456789abcdef"
	_, page = b.read(b.Get(r.url + panel.LoginPath + "?next=" + url.QueryEscape(consent)))
	if !strings.Contains(page, `id="for-consent"`) || !strings.Contains(page, `name="next" value="`+consent+`"`) {
		t.Fatalf("the sign-in page for a consent request:\n%s", page)
	}
	prov, id = b.toProvider(t, r.url, consent)
	if _, page := b.logIn(t, prov, id, "test-user2"); !strings.Contains(page, `content="0;url=`+consent+`"`) {
		t.Fatalf("SSO from a consent request did not come back to it: %s", page)
	}
	b = newBrowser(t)
	prov, id = b.toProvider(t, r.url, "https://evil.example/")
	if _, page := b.logIn(t, prov, id, "test-user2"); !strings.Contains(page, `content="0;url=/panel/"`) {
		t.Fatalf("a return path elsewhere was followed: %s", page)
	}
}

// TestSSORefusesWhatWasNotAsked: a tampered state, a callback presented
// again, a code already spent, and the provider's error each get the
// uniform refusal and no session.
func TestSSORefusesWhatWasNotAsked(t *testing.T) {
	r := newRelay(t, allowed, nil)
	callback := func(b *browser) *url.URL {
		t.Helper()
		b.stopAt = signin.CallbackPath
		prov, id := b.toProvider(t, r.url, "/panel/")
		resp, _ := b.logIn(t, prov, id, r.user())
		loc, err := resp.Location()
		if resp.StatusCode != http.StatusFound || err != nil || loc.Path != signin.CallbackPath {
			t.Fatalf("the provider sent the browser to %v (%d)", loc, resp.StatusCode)
		}
		b.stopAt = ""
		return loc
	}
	refused := func(name string, b *browser, u *url.URL) {
		t.Helper()
		resp, page := b.read(b.Get(u.String()))
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(page, refusal) || b.hasSession(r.url) {
			t.Errorf("%s: %d, session %v: %.300s", name, resp.StatusCode, b.hasSession(r.url), page)
		}
	}
	with := func(u *url.URL, key, value string) *url.URL {
		v := *u
		q := v.Query()
		q.Set(key, value)
		v.RawQuery = q.Encode()
		return &v
	}

	b := newBrowser(t)
	cb := callback(b)
	refused("tampered state", b, with(cb, "state", cb.Query().Get("state")+"x"))
	refused("the untampered callback after a refusal", b, cb)

	b = newBrowser(t)
	cb = callback(b)
	if resp, _ := b.read(b.Get(cb.String())); resp.StatusCode != http.StatusOK || !b.hasSession(r.url) {
		t.Fatalf("a good callback: %d", resp.StatusCode)
	}
	spent := cb.Query().Get("code")
	b = newBrowser(t)
	refused("the same callback again, in another browser", b, cb)

	// A fresh sign-in whose state is right, carrying a code already spent.
	b = newBrowser(t)
	fresh := callback(b)
	refused("a replayed code", b, with(fresh, "code", spent))

	b = newBrowser(t)
	fresh = callback(b)
	refused("the provider's error", b, with(with(fresh, "error", "access_denied"), "code", ""))

	// An error beside a good code is still the provider's refusal.
	b = newBrowser(t)
	fresh = callback(b)
	refused("the provider's error beside a good code", b, with(fresh, "error", "access_denied"))
	b = newBrowser(t)
	fresh = callback(b)
	refused("no code", b, with(fresh, "code", ""))
}

// idToken signs in at the provider as user for client (by hand, as an
// application would) and returns the tokens it issues, an ID token with
// nonce among them.
func idToken(t *testing.T, issuer string, cfg *oauth2.Config, user, nonce string) *oauth2.Token {
	t.Helper()
	b := newBrowser(t)
	redirect, _ := url.Parse(cfg.RedirectURL)
	b.stopAt = redirect.Path
	resp, _ := b.read(b.Get(cfg.AuthCodeURL("st", oauth2.SetAuthURLParam("nonce", nonce))))
	id := resp.Request.URL.Query().Get("authRequestID")
	if id == "" {
		t.Fatalf("the provider refused the request: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, page := b.logIn(t, issuer, id, user)
	loc, err := resp.Location()
	if err != nil {
		t.Fatalf("no redirect back: %d %s", resp.StatusCode, page)
	}
	tok, err := cfg.Exchange(context.Background(), loc.Query().Get("code"))
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := tok.Extra("id_token").(string); raw == "" {
		t.Fatal("no ID token")
	}
	return tok
}

// TestSSOVerifiesTheIDToken: an ID token the provider issued to the relay
// passes; the same token past its expiry, one for another application,
// and one with another nonce are refused.
func TestSSOVerifiesTheIDToken(t *testing.T) {
	var (
		mu   sync.Mutex
		skew time.Duration
	)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(skew) }
	r := newRelay(t, allowed, now)
	issuer := r.issuer
	discovered, err := oidc.NewProvider(context.Background(), issuer)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := discovered.Endpoint()
	mine := &oauth2.Config{ClientID: clientID, ClientSecret: secret, Endpoint: endpoint, RedirectURL: r.url + signin.CallbackPath, Scopes: []string{"openid", "email"}}
	other := &oauth2.Config{ClientID: otherID, ClientSecret: "other-secret", Endpoint: endpoint, RedirectURL: otherRedir, Scopes: []string{"openid", "email"}}
	ctx := context.Background()

	good := idToken(t, issuer, mine, r.user(), "n1")
	if email, err := r.sso.VerifyIDToken(ctx, good, "n1"); err != nil || email != allowed {
		t.Fatalf("the relay's own ID token: %q, %v", email, err)
	}
	if _, err := r.sso.VerifyIDToken(ctx, good, "n2"); !errors.Is(err, signin.ErrRefused) {
		t.Errorf("another nonce: %v", err)
	}
	foreign := idToken(t, issuer, other, r.user(), "n1")
	if _, err := r.sso.VerifyIDToken(ctx, foreign, "n1"); !errors.Is(err, signin.ErrRefused) || !strings.Contains(err.Error(), "audience") {
		t.Errorf("an ID token for another application: %v", err)
	}
	mu.Lock()
	skew = 2 * time.Hour // the provider's ID tokens live an hour
	mu.Unlock()
	if _, err := r.sso.VerifyIDToken(ctx, good, "n1"); !errors.Is(err, signin.ErrRefused) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("an expired ID token: %v", err)
	}
}

// TestSSOTakesTheEmailOfTheIDTokensSubject: the e-mail address is asked
// at the provider's UserInfo endpoint with the access token that came
// with the ID token; an access token of another person (both allowed by
// the rules) signs no one in.
func TestSSOTakesTheEmailOfTheIDTokensSubject(t *testing.T) {
	r := newRelay(t, "@zitadel.ch", nil)
	discovered, err := oidc.NewProvider(context.Background(), r.issuer)
	if err != nil {
		t.Fatal(err)
	}
	mine := &oauth2.Config{ClientID: clientID, ClientSecret: secret, Endpoint: discovered.Endpoint(), RedirectURL: r.url + signin.CallbackPath, Scopes: []string{"openid", "email"}}
	ctx := context.Background()
	first := idToken(t, r.issuer, mine, r.user(), "n1")
	second := idToken(t, r.issuer, mine, "test-user2", "n1")
	if email, err := r.sso.VerifyIDToken(ctx, second, "n1"); err != nil || email != oidctest.Other {
		t.Fatalf("test-user2's own tokens: %q, %v", email, err)
	}
	mixed := (&oauth2.Token{AccessToken: second.AccessToken, TokenType: second.TokenType}).WithExtra(map[string]any{"id_token": first.Extra("id_token")})
	if email, err := r.sso.VerifyIDToken(ctx, mixed, "n1"); !errors.Is(err, signin.ErrRefused) || email != "" {
		t.Errorf("test-user's ID token with test-user2's access token: %q, %v", email, err)
	}
}

// people is the provider's directory of users, for a test that needs
// others than oidctest's.
type people map[string]*storage.User

func (p people) GetUserByID(id string) *storage.User { return p[id] }
func (p people) GetUserByUsername(name string) *storage.User {
	for _, u := range p {
		if u.Username == name {
			return u
		}
	}
	return nil
}
func (p people) ExampleClientID() string { return storage.ServiceUserID }

// team is the directory of TestSSORefusesAnUnverifiedEmail and
// TestSSOWithTheEmailInTheIDToken: carol's address is not verified,
// dave's is.
var team = people{
	"u1": {ID: "u1", Username: "carol", Password: password, Email: "carol@team.example", EmailVerified: false},
	"u2": {ID: "u2", Username: "dave", Password: password, Email: "dave@team.example", EmailVerified: true},
}

// inIDToken is a provider's storage whose clients get the e-mail address
// in the ID token itself, as Google and Keycloak send it.
type inIDToken struct{ *storage.Storage }

func (s inIDToken) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return assertingClient{c}, nil
}

type assertingClient struct{ op.Client }

func (assertingClient) IDTokenUserinfoClaimsAssertion() bool { return true }

// teamProvider starts a provider of team's people, knowing the relay's
// client, and a SignIn using it with rules that allow the whole team;
// with emailInIDToken its ID tokens carry the e-mail address.
func teamProvider(t *testing.T, emailInIDToken bool) (issuer string, s *signin.SignIn, cfg *oauth2.Config) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer = "http://" + ln.Addr().String()
	st := storage.NewStorageWithClients(team, map[string]*storage.Client{clientID: storage.WebClient(clientID, secret, otherRedir)})
	var opStorage exampleop.Storage = st
	if emailInIDToken {
		opStorage = inIDToken{st}
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: exampleop.SetupServer(issuer, opStorage, slog.New(slog.NewTextHandler(io.Discard, nil)), false, op.WithAllowInsecure())}}
	srv.Start()
	t.Cleanup(srv.Close)

	state, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { state.Close() })
	rules, err := signin.ParseRules("carol@team.example,@team.example")
	if err != nil {
		t.Fatal(err)
	}
	s, err = signin.New(signin.Config{State: state, PanelURL: &url.URL{Scheme: "https", Host: "relay.example"},
		OIDC: &signin.OIDCConfig{Issuer: issuer, ClientID: clientID, ClientSecret: secret, Rules: rules}})
	if err != nil {
		t.Fatal(err)
	}
	discovered, err := oidc.NewProvider(context.Background(), issuer)
	if err != nil {
		t.Fatal(err)
	}
	return issuer, s, &oauth2.Config{ClientID: clientID, ClientSecret: secret, Endpoint: discovered.Endpoint(), RedirectURL: otherRedir, Scopes: []string{"openid", "email"}}
}

// TestSSORefusesAnUnverifiedEmail: a person whose address the provider
// has not verified is refused even where the rules allow the address,
// whether the provider says so in the ID token or at UserInfo; the same
// provider's verified person beside them is let in.
func TestSSORefusesAnUnverifiedEmail(t *testing.T) {
	ctx := context.Background()
	for _, emailInIDToken := range []bool{false, true} {
		issuer, s, cfg := teamProvider(t, emailInIDToken)
		if email, err := s.VerifyIDToken(ctx, idToken(t, issuer, cfg, "dave", "n1"), "n1"); err != nil || email != "dave@team.example" {
			t.Fatalf("a verified address (in the ID token: %v): %q, %v", emailInIDToken, email, err)
		}
		if email, err := s.VerifyIDToken(ctx, idToken(t, issuer, cfg, "carol", "n1"), "n1"); !errors.Is(err, signin.ErrRefused) || email != "" {
			t.Errorf("an unverified address (in the ID token: %v): %q, %v", emailInIDToken, email, err)
		}
	}
}

// TestSSOWithTheEmailInTheIDToken: a provider that puts the verified
// address in the ID token is not asked again at UserInfo: the sign-in
// stands on the ID token even once the access token that came with it is
// revoked, while a provider that does not is asked, and that access
// token no longer gets the address.
func TestSSOWithTheEmailInTheIDToken(t *testing.T) {
	ctx := context.Background()
	for _, emailInIDToken := range []bool{true, false} {
		issuer, s, cfg := teamProvider(t, emailInIDToken)
		tok := idToken(t, issuer, cfg, "dave", "n1")
		req, _ := http.NewRequest(http.MethodPost, issuer+"/revoke", strings.NewReader(url.Values{"token": {tok.AccessToken}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(clientID, secret)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("revoke the access token: %v, %v", resp, err)
		} else {
			resp.Body.Close()
		}
		email, err := s.VerifyIDToken(ctx, tok, "n1")
		if emailInIDToken && (err != nil || email != "dave@team.example") {
			t.Errorf("the address in the ID token, the access token revoked: %q, %v", email, err)
		}
		if !emailInIDToken && (!errors.Is(err, signin.ErrRefused) || email != "") {
			t.Errorf("the address at UserInfo, the access token revoked: %q, %v", email, err)
		}
	}
}
