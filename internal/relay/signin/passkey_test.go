package signin_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdpwebauthn "github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/pgtest"
	"github.com/commandcore/commandcore/internal/relay/panel"
	"github.com/commandcore/commandcore/internal/relay/signin"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// replica is one relay's panel, over its own connection to the shared
// state, at http://localhost:PORT (passkeys need a host name).
type replica struct {
	url    string
	state  *store.Store
	mu     sync.Mutex
	audits []string
}

func (r *replica) audited() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.audits...)
}

func newReplica(t *testing.T, database string) *replica {
	t.Helper()
	st, err := store.OpenPostgres(database)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{url: "http://localhost:" + strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:"), state: st}
	u, _ := url.Parse(r.url)
	s, err := signin.New(signin.Config{State: st, PanelURL: u})
	if err != nil {
		t.Fatal(err)
	}
	p, err := panel.New(panel.Config{State: st, SignIn: s, Audit: func(e store.AuditEntry) {
		r.mu.Lock()
		r.audits = append(r.audits, e.Principal+" "+e.Tool+" "+e.Outcome)
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

// chromium starts a headless Chromium with a virtual authenticator that
// holds discoverable credentials and verifies its user.
func chromium(t *testing.T) context.Context {
	ctx, _ := chromiumAuthenticator(t)
	return ctx
}

// chromiumAuthenticator is chromium, and its authenticator's ID.
func chromiumAuthenticator(t *testing.T) (context.Context, cdpwebauthn.AuthenticatorID) {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv(pgtest.RequireEnv) == "" {
			t.Skip("no chromium on PATH (apt-get install chromium)")
		}
		t.Fatal("no chromium on PATH, and " + pgtest.RequireEnv + " is set")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	var id cdpwebauthn.AuthenticatorID
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, cdpwebauthn.Enable, cdpwebauthn.EnableParams{}); err != nil {
			return err
		}
		added, err := cdp.Call(ctx, t, cdpwebauthn.AddVirtualAuthenticator, cdpwebauthn.AddVirtualAuthenticatorParams{
			Options: &cdpwebauthn.VirtualAuthenticatorOptions{
				Protocol: cdpwebauthn.AuthenticatorProtocolCtap2, Ctap2version: cdpwebauthn.Ctap2versionCtap21,
				Transport:      cdpwebauthn.AuthenticatorTransportInternal,
				HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
			}})
		id = added.AuthenticatorID
		return err
	}))
	if err != nil {
		t.Fatalf("start chromium with a virtual authenticator: %v", err)
	}
	return ctx, id
}

// run runs steps in the browser, within 30 s.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value is what an action gives, within 10 s.
func value[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func click(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible)
}

func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}

// TestPasskeysInABrowser: in Chromium with a virtual authenticator, an
// admin signed in by code adds a passkey on one replica, signs out, and
// signs in with it on another replica of the same PostgreSQL state,
// landing on the Overview; removed there, the same passkey no longer
// signs in anywhere (the uniform refusal, no session). Each step is
// audited.
func TestPasskeysInABrowser(t *testing.T) {
	pg := pgtest.StartT(t)
	db, err := pg.CreateDatabase("passkeys")
	if err != nil {
		t.Fatal(err)
	}
	a, b := newReplica(t, db), newReplica(t, db)
	code, err := a.state.CreateSignIn("alice", limits.SignInCodeTTL, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx := chromium(t)

	run(t, ctx, "open the sign-in page", chromedp.Navigate(a.url+panel.LoginPath), visible("#signin"))
	if value(t, ctx, chromedp.Evaluate[bool](`document.querySelector("#signin-passkey") !== null`)) {
		t.Fatal("the sign-in page offers a passkey on a relay that has none")
	}
	run(t, ctx, "sign in with the code",
		chromedp.Navigate(a.url+panel.LoginPath+"?code="+code),
		click("#signin"),
		visible("nav"))
	run(t, ctx, "add a passkey",
		chromedp.Navigate(a.url+panel.Prefix+"passkeys"),
		click("#add-passkey"),
		visible("tr[data-passkey]"))
	if keys, err := a.state.Passkeys("alice"); err != nil || len(keys) != 1 {
		t.Fatalf("alice's passkeys after adding one: %d, %v", len(keys), err)
	}
	run(t, ctx, "sign out",
		click("form.signout button"),
		visible("#signin-passkey"))

	run(t, ctx, "sign in with the passkey on the other replica",
		chromedp.Navigate(b.url+panel.LoginPath),
		click("#signin-passkey"),
		visible("nav"))
	if h := value(t, ctx, chromedp.Text(chromedp.CSS("h1"), chromedp.NodeReady)); h != "Overview" {
		t.Fatalf("after the passkey sign-in: %q", h)
	}
	keys, _ := b.state.Passkeys("alice")
	if len(keys) != 1 || keys[0].UsedAt == nil {
		t.Fatalf("the passkey's use was not noted: %+v", keys)
	}

	run(t, ctx, "remove the passkey",
		chromedp.Navigate(b.url+panel.Prefix+"passkeys"),
		click("tr[data-passkey] button.danger"),
		visible("#no-passkeys"),
		click("form.signout button"),
		visible("#signin"))
	// Another admin's passkey keeps the button on the page; the browser's
	// authenticator still holds alice's removed one and offers it.
	if _, err := a.state.CreateSignIn("bob", time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := a.state.AddPasskey("bob", []byte("bob's key"), []byte("{}"), time.Now()); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "sign in with the removed passkey",
		chromedp.Navigate(a.url+panel.LoginPath),
		click("#signin-passkey"),
		visible("#passkey-error"))
	if refusal := value(t, ctx, chromedp.Text(chromedp.CSS("#passkey-error"), chromedp.NodeVisible)); !strings.Contains(refusal, "invalid, used or expired, or not allowed") {
		t.Fatalf("the removed passkey's refusal: %q", refusal)
	}
	run(t, ctx, "open the Overview", chromedp.Navigate(a.url+panel.Prefix), visible("#signin"))

	want := map[string]bool{"admin:alice panel.sign_in ok": true, "admin:alice panel.passkey_add ok": true,
		"admin:alice panel.sign_in_passkey ok": true, "admin:alice panel.passkey_remove ok": true}
	for _, line := range append(a.audited(), b.audited()...) {
		delete(want, line)
	}
	if len(want) != 0 {
		t.Fatalf("not audited: %v (a: %v, b: %v)", want, a.audited(), b.audited())
	}
}

// TestPasskeysPageSendsToThePanelsOwnAddress: reached by another address
// than its public one (127.0.0.1 for localhost), the Passkeys page offers
// no passkey to add and links to the address where passkeys work, and
// the sign-in page offers a passkey only at that address.
func TestPasskeysPageSendsToThePanelsOwnAddress(t *testing.T) {
	pg := pgtest.StartT(t)
	db, err := pg.CreateDatabase("elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	r := newReplica(t, db)
	code, _ := r.state.CreateSignIn("alice", time.Minute, time.Now())
	byAddress := strings.Replace(r.url, "localhost", "127.0.0.1", 1)
	ctx := chromium(t)
	run(t, ctx, "sign in by address",
		chromedp.Navigate(byAddress+panel.LoginPath+"?code="+code), click("#signin"), visible("nav"),
		chromedp.Navigate(byAddress+panel.Prefix+"passkeys"), visible("#passkeys-elsewhere"))
	if href := value(t, ctx, chromedp.Evaluate[string](`document.querySelector("#passkeys-elsewhere").href`)); href != r.url+panel.Prefix+"passkeys" {
		t.Fatalf("the link to the panel's own address: %q", href)
	}
	if value(t, ctx, chromedp.Evaluate[bool](`document.querySelector("#add-passkey") !== null`)) {
		t.Fatal("the page offers to add a passkey where none can be made")
	}
	if err := r.state.AddPasskey("alice", []byte("k"), []byte("{}"), time.Now()); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "sign out", click("form.signout button"), visible("#signin"))
	if value(t, ctx, chromedp.Evaluate[bool](`document.querySelector("#signin-passkey") !== null`)) {
		t.Fatal("the sign-in page by address offers a passkey, which cannot work there")
	}
	run(t, ctx, "open the sign-in page by name", chromedp.Navigate(r.url+panel.LoginPath), visible("#signin-passkey"))
}

// TestPasskeyOfAClonedAuthenticator: a passkey whose signature counter
// has gone back since its last sign-in (a copy of the key, used less
// than the original) signs no one in; the key with a counter past the
// last one still does.
func TestPasskeyOfAClonedAuthenticator(t *testing.T) {
	pg := pgtest.StartT(t)
	db, err := pg.CreateDatabase("cloned")
	if err != nil {
		t.Fatal(err)
	}
	r := newReplica(t, db)
	code, err := r.state.CreateSignIn("alice", limits.SignInCodeTTL, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, authenticator := chromiumAuthenticator(t)
	run(t, ctx, "sign in with the code, add a passkey, sign out, sign in with it, sign out",
		chromedp.Navigate(r.url+panel.LoginPath+"?code="+code), click("#signin"), visible("nav"),
		chromedp.Navigate(r.url+panel.Prefix+"passkeys"), click("#add-passkey"), visible("tr[data-passkey]"),
		click("form.signout button"), visible("#signin-passkey"),
		click("#signin-passkey"), visible("nav"),
		click("form.signout button"), visible("#signin-passkey"))

	// counter sets the authenticator's one credential's signature counter
	// and returns what it was.
	counter := func(set float64) (was float64) {
		t.Helper()
		err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			got, err := cdp.Call(ctx, tg, cdpwebauthn.GetCredentials, cdpwebauthn.GetCredentialsParams{AuthenticatorID: authenticator})
			if err != nil {
				return err
			}
			if len(got.Credentials) != 1 {
				t.Fatalf("the authenticator holds %d credentials", len(got.Credentials))
			}
			was = got.Credentials[0].SignCount
			_, err = cdp.Call(ctx, tg, cdpwebauthn.SetCredentialProperties, cdpwebauthn.SetCredentialPropertiesParams{
				AuthenticatorID: authenticator, CredentialID: got.Credentials[0].CredentialID, SignCount: &set})
			return err
		}))
		if err != nil {
			t.Fatalf("set the signature counter: %v", err)
		}
		return was
	}
	used := counter(0)
	if used < 1 {
		t.Fatalf("the authenticator's counter is %v after a sign-in: it keeps none", used)
	}
	counter(used - 1)
	run(t, ctx, "sign in with the cloned passkey", click("#signin-passkey"), visible("#passkey-error"))
	if refusal := value(t, ctx, chromedp.Text(chromedp.CSS("#passkey-error"), chromedp.NodeVisible)); !strings.Contains(refusal, "invalid, used or expired, or not allowed") {
		t.Fatalf("the cloned passkey's refusal: %q", refusal)
	}
	run(t, ctx, "open the Overview", chromedp.Navigate(r.url+panel.Prefix), visible("#signin"))

	counter(used + 5)
	run(t, ctx, "sign in with the original passkey", click("#signin-passkey"), visible("nav"))
}
