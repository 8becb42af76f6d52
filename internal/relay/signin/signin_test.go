package signin

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/relay/store"
)

func openState(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func mustURL(s string) *url.URL {
	u, _ := url.Parse(s)
	return u
}

// TestNewOffersWhatTheAddressAllows: a panel URL must be an http(s)
// origin; SSO needs an issuer and a client ID; a panel reached by an IP
// address offers no passkeys, and its ceremonies say why.
func TestNewOffersWhatTheAddressAllows(t *testing.T) {
	st := openState(t)
	for _, bad := range []*url.URL{nil, mustURL("ftp://relay.example"), mustURL("https://"), mustURL("http://"), mustURL("relay.example:8441"), mustURL("/panel/")} {
		if _, err := New(Config{State: st, PanelURL: bad}); err == nil || err.Error() != "the panel's public URL must be an http or https origin" {
			t.Errorf("panel URL %v: %v", bad, err)
		}
	}
	if _, err := New(Config{State: st, PanelURL: mustURL("https://relay.example"), OIDC: &OIDCConfig{ClientID: "x"}}); err == nil {
		t.Error("SSO without an issuer accepted")
	}
	var none *SignIn
	if none.SSO() || none.Passkeys() {
		t.Error("a nil SignIn offers something")
	}
	byName, err := New(Config{State: st, PanelURL: mustURL("https://relay.example:8441")})
	if err != nil || !byName.Passkeys() || byName.SSO() {
		t.Fatalf("by name: passkeys %v, SSO %v, %v", byName.Passkeys(), byName.SSO(), err)
	}
	byAddress, err := New(Config{State: st, PanelURL: mustURL("http://127.0.0.1:8441")})
	if err != nil || byAddress.Passkeys() {
		t.Fatalf("by address: passkeys %v, %v", byAddress.Passkeys(), err)
	}
	if _, _, err := byAddress.BeginPasskey(); !errors.Is(err, ErrNoPasskeys) {
		t.Errorf("BeginPasskey by address: %v", err)
	}
	if _, _, err := byAddress.BeginAddPasskey("alice"); !errors.Is(err, ErrNoPasskeys) {
		t.Errorf("BeginAddPasskey by address: %v", err)
	}
	if err := byAddress.FinishAddPasskey("alice", "", nil); !errors.Is(err, ErrNoPasskeys) {
		t.Errorf("FinishAddPasskey by address: %v", err)
	}
	if _, _, err := byAddress.FinishPasskey("", nil); !errors.Is(err, ErrNoPasskeys) {
		t.Errorf("FinishPasskey by address: %v", err)
	}
	if _, _, err := byName.BeginSSO(context.Background(), "/panel/"); !errors.Is(err, ErrRefused) {
		t.Errorf("BeginSSO without SSO: %v", err)
	}
	if _, _, _, err := byName.FinishSSO(context.Background(), "", nil); !errors.Is(err, ErrRefused) {
		t.Errorf("FinishSSO without SSO: %v", err)
	}
}

// TestPasskeyCeremoniesRefuseWhatTheyDidNotAsk: a ceremony finishes once,
// for the admin who began it, with a credential the browser made; a
// sign-in with an unknown cookie, another ceremony's or garbage is
// refused.
func TestPasskeyCeremoniesRefuseWhatTheyDidNotAsk(t *testing.T) {
	st := openState(t)
	if _, err := st.CreateSignIn("alice", time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{State: st, PanelURL: mustURL("https://relay.example")})
	if err != nil {
		t.Fatal(err)
	}
	options, cookie, err := s.BeginAddPasskey("alice")
	if err != nil || !strings.Contains(string(options), `"residentKey":"required"`) || !strings.Contains(string(options), `"userVerification":"required"`) {
		t.Fatalf("registration options %s, %v", options, err)
	}
	if err := s.FinishAddPasskey("bob", cookie, []byte("{}")); !errors.Is(err, ErrRefused) {
		t.Errorf("another admin finishing alice's ceremony: %v", err)
	}
	if err := s.FinishAddPasskey("alice", cookie, []byte("{}")); !errors.Is(err, ErrRefused) {
		t.Errorf("a ceremony finished twice: %v", err)
	}
	_, cookie, _ = s.BeginAddPasskey("alice")
	if err := s.FinishAddPasskey("alice", cookie, []byte(`{"id":"x"}`)); !errors.Is(err, ErrRefused) {
		t.Errorf("a garbage credential: %v", err)
	}
	options, cookie, err = s.BeginPasskey()
	if err != nil || !strings.Contains(string(options), `"userVerification":"required"`) || strings.Contains(string(options), "allowCredentials") {
		t.Fatalf("sign-in options %s, %v", options, err)
	}
	if _, _, err := s.FinishPasskey(cookie, []byte(`{"id":"x"}`)); !errors.Is(err, ErrRefused) {
		t.Errorf("a garbage assertion: %v", err)
	}
	_, add, _ := s.BeginAddPasskey("alice")
	if _, _, err := s.FinishPasskey(add, []byte("{}")); !errors.Is(err, ErrRefused) {
		t.Errorf("a registration's cookie at sign-in: %v", err)
	}
	if Why(errors.New("x")) != "refused" || !strings.HasPrefix(Why(refused("state", nil)), "state") {
		t.Error("Why")
	}
	if e := refused("code exchange", errors.New("boom")); !strings.Contains(e.Error(), "boom") || !errors.Is(e, ErrRefused) || errors.Unwrap(e) == nil {
		t.Errorf("a refusal with a cause: %v", e)
	}
}

// TestSSOWithTheProviderDown: a relay whose provider cannot be reached
// starts, cannot begin an SSO sign-in (nothing kept), and refuses a
// callback.
func TestSSOWithTheProviderDown(t *testing.T) {
	st := openState(t)
	rules, _ := ParseRules("@example.com")
	s, err := New(Config{State: st, PanelURL: mustURL("https://relay.example"),
		OIDC: &OIDCConfig{Issuer: "http://127.0.0.1:1", ClientID: "relay", ClientSecret: "s", Rules: rules}})
	if err != nil || !s.SSO() {
		t.Fatalf("New with a provider down: %v", err)
	}
	if _, cookie, err := s.BeginSSO(context.Background(), "/panel/"); err == nil || cookie != "" {
		t.Fatalf("BeginSSO with the provider down: %q, %v", cookie, err)
	}
	cookie, _ := st.PutSignInState("oidc", []byte(`{"state":"s"}`), time.Now())
	if _, _, _, err := s.FinishSSO(context.Background(), cookie, url.Values{"state": {"s"}, "code": {"c"}}); !errors.Is(err, ErrRefused) || Why(err) != "discovery" {
		t.Fatalf("a callback with the provider down: %v", err)
	}
	garbled, _ := st.PutSignInState("oidc", []byte(`not json`), time.Now())
	if _, _, _, err := s.FinishSSO(context.Background(), garbled, nil); !errors.Is(err, ErrRefused) {
		t.Fatalf("a garbled state: %v", err)
	}
}

// FuzzFinishPasskey: whatever a browser sends back as its passkey's
// answer, to a sign-in or a registration under way, is refused without a
// session or a passkey, never a panic.
func FuzzFinishPasskey(f *testing.F) {
	st, err := store.Open(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateSignIn("alice", time.Hour, time.Now()); err != nil {
		f.Fatal(err)
	}
	s, err := New(Config{State: st, PanelURL: mustURL("https://relay.example")})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{`{}`, `{"id":"AA","rawId":"AA","type":"public-key","response":{"clientDataJSON":"e30","authenticatorData":"AA","signature":"AA","userHandle":"AA"}}`,
		`{"id":"AA","rawId":"AA","type":"public-key","response":{"clientDataJSON":"e30","attestationObject":"oA"}}`, `null`, `[`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		_, cookie, err := s.BeginPasskey()
		if err != nil {
			t.Fatal(err)
		}
		if admin, session, err := s.FinishPasskey(cookie, answer); err == nil || admin != "" || session != "" {
			t.Fatalf("a made-up assertion signed %q in: %v", admin, err)
		}
		_, cookie, err = s.BeginAddPasskey("alice")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.FinishAddPasskey("alice", cookie, answer); err == nil {
			t.Fatal("a made-up credential was registered")
		}
	})
}

// TestSSOGivesUpOnASilentProvider: a provider that takes the connection
// and never answers is given up on after 10 s, so a sign-in page does not
// hang on it; nothing is kept.
func TestSSOGivesUpOnASilentProvider(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		// Accept and hold every connection, answering nothing.
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	st := openState(t)
	rules, _ := ParseRules("@example.com")
	s, err := New(Config{State: st, PanelURL: mustURL("https://relay.example"),
		OIDC: &OIDCConfig{Issuer: "http://" + ln.Addr().String(), ClientID: "relay", ClientSecret: "s", Rules: rules}})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		cookie string
		err    error
	}
	done := make(chan answer, 1)
	start := time.Now()
	go func() {
		_, cookie, err := s.BeginSSO(context.Background(), "/panel/")
		done <- answer{cookie, err}
	}()
	select {
	case a := <-done:
		took := time.Since(start)
		if a.err == nil || a.cookie != "" || took < 10*time.Second {
			t.Fatalf("BeginSSO with a silent provider: %q, %v after %v", a.cookie, a.err, took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("BeginSSO still waits for a silent provider after 15 s")
	}
}
