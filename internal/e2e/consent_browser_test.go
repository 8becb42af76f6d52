package e2e

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/panel"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// consentIssuer is the relay's public URL in the consent test.
const consentIssuer = "https://relay.example"

// oauthClientSite is an OAuth client's own site, on another host than
// the panel (localhost, the panel being on 127.0.0.1), so the browser
// treats a navigation from it as cross-site: /start links to the consent
// page as the authorization endpoint's redirect does, /callback is the
// redirect URI and keeps each answer's query.
type oauthClientSite struct {
	url     string
	mu      sync.Mutex
	answers []url.Values
}

func newOAuthClientSite(t *testing.T) *oauthClientSite {
	t.Helper()
	c := &oauthClientSite{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.URL.Path {
		case "/start":
			fmt.Fprintf(w, `<!doctype html><title>App</title><a id="go" href="%s">Connect CommandCore</a>`, r.URL.Query().Get("to"))
		case "/callback":
			c.mu.Lock()
			c.answers = append(c.answers, r.URL.Query())
			c.mu.Unlock()
			fmt.Fprint(w, `<!doctype html><title>App</title><p id="back">Back in the app.</p>`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c.url = strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	return c
}

func (c *oauthClientSite) last(t *testing.T) url.Values {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.answers) == 0 {
		t.Fatal("no answer reached the client's redirect URI")
	}
	return c.answers[len(c.answers)-1]
}

// TestConsentInABrowser drives the OAuth consent page in headless
// Chromium, over a real relay state: a person sent to it from the
// client's site signs in and comes back to it, narrows it to one device
// and two tools and allows; the client gets a code with its state and the
// issuer, and the code redeems into a connection with exactly that device
// and those tools. Signed in, a second cross-site arrival reaches the page
// at once (the SameSite=Strict cookie is sent on the panel's reload) and
// Deny sends access_denied. No page breaks the Content-Security-Policy.
func TestConsentInABrowser(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var devs []*store.Device
	for _, name := range []string{"build-box", "web-1"} {
		code, err := st.CreateEnrollCode("", time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		dev, _, _, err := st.Enroll(code, name, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, dev)
	}
	p, err := panel.New(panel.Config{State: st, Issuer: consentIssuer})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	client := newOAuthClientSite(t)
	b := newBrowser(t, srv.URL)

	sum := sha256.Sum256([]byte("the client's verifier"))
	request := func(state string) string {
		t.Helper()
		id, err := st.CreateAuthRequest(store.AuthRequest{ClientID: client.url + "/client.json", ClientName: "Example Assistant",
			RedirectURI: client.url + "/callback", State: state, Challenge: base64.RawURLEncoding.EncodeToString(sum[:]),
			Resource: consentIssuer + "/mcp", Scope: "run"}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	// arrive follows a link from the client's site to the consent page.
	arrive := func(id string) {
		t.Helper()
		b.open(client.url + "/start?to=" + url.QueryEscape(srv.URL+panel.ConsentPath+id))
		b.load("follow the client's link", chromedp.Click(chromedp.CSS("#go"), chromedp.NodeVisible))
	}
	click := func(sel string) {
		t.Helper()
		if _, err := within(b, 10*time.Second, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible)); err != nil {
			t.Fatalf("click %s: %v", sel, err)
		}
	}

	id := request("first-state")
	arrive(id)
	b.await("the browser is sent to sign in, saying an app asks", `location.pathname === "/panel/login" && !!document.getElementById("for-consent")`, 10*time.Second)
	code, err := st.CreateSignIn("olga", limits.SignInCodeTTL, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b.fill("#code", code)
	b.submit("#signin")
	if path := eval[string](b, "location.pathname"); path != panel.ConsentPath+id {
		t.Fatalf("after sign-in at %s, want the consent page", path)
	}
	for sel, want := range map[string]string{"#client": "Example Assistant", "#redirect-host": strings.TrimPrefix(client.url, "http://"),
		"#client-id": client.url + "/client.json"} {
		if got := b.text(sel); got != want {
			t.Errorf("%s reads %q, want %q", sel, got, want)
		}
	}
	if !eval[bool](b, `document.querySelector('input[name="preset"][value="run"]').checked && document.getElementById("principal").value === "olga" &&
		document.getElementById("days").value === "30" && [...document.querySelectorAll('input[name="device"]')].filter(e => e.checked).length === 2`) {
		t.Fatalf("the page does not preselect the scope asked for, the person's name, 30 days and the devices: %s", b.text("main"))
	}
	b.shot("consent")
	b.atPhoneWidth(func() {
		b.fits("the consent page")
		b.shot("consent-phone")
	})

	// Narrow: one device, two single tools, no preset.
	click(fmt.Sprintf(`input[name="device"][value=%q]`, devs[1].ID))
	click(`input[name="preset"][value="run"]`)
	click("#powers summary")
	click(`input[name="tool"][value="process.jobs"]`)
	click(`input[name="tool"][value="process.output"]`)
	b.submit("#allow")
	b.await("the browser is back at the client", `location.pathname === "/callback"`, 10*time.Second)
	q := client.last(t)
	if q.Get("state") != "first-state" || q.Get("iss") != consentIssuer || !strings.HasPrefix(q.Get("code"), "cac_") || q.Has("error") {
		t.Fatalf("the client got %v", q)
	}
	tok, _, err := st.RedeemAuthCode(q.Get("code"), func(c *store.AuthCode) error {
		if c.RedirectURI != client.url+"/callback" {
			return fmt.Errorf("the code is for %s", c.RedirectURI)
		}
		return nil
	}, time.Now())
	if err != nil {
		t.Fatalf("the code does not redeem: %v", err)
	}
	if !slices.Equal(tok.Devices, []string{devs[0].ID}) || !slices.Equal(tok.Tools, []string{"process.jobs", "process.output"}) ||
		tok.Principal != "olga" || tok.Kind != store.TokenOAuth || tok.Client != "Example Assistant" {
		t.Fatalf("the connection is %+v, want device %s and tools process.jobs, process.output", tok, devs[0].ID)
	}

	// Signed in: another cross-site arrival reaches the page itself.
	id = request("second-state")
	arrive(id)
	b.await("the consent page opens without signing in again", fmt.Sprintf(`location.pathname === %q && !!document.getElementById("deny")`, panel.ConsentPath+id), 10*time.Second)
	b.submit("#deny")
	b.await("the browser is back at the client", `location.pathname === "/callback"`, 10*time.Second)
	if q := client.last(t); q.Get("error") != "access_denied" || q.Get("state") != "second-state" || q.Get("iss") != consentIssuer || q.Has("code") {
		t.Fatalf("after Deny the client got %v", q)
	}

	// An answered request is a page of its own, not a redirect.
	if status := b.open(srv.URL + panel.ConsentPath + id); status != http.StatusNotFound || !strings.Contains(b.text("main"), "already answered or expired") {
		t.Errorf("an answered request: %d %q", status, b.text("main"))
	}
	b.open(srv.URL + panel.Prefix + "tokens")
	row := fmt.Sprintf(`tr[data-token=%q]`, tok.ID)
	if kind, client := b.text(row+` [data-field="kind"]`), b.text(row+` [data-field="name"]`); kind != "oauth" || client != "Example Assistant" {
		t.Errorf("the Tokens page lists the connection as %q, %q", kind, client)
	}
	b.shot("tokens-oauth")
	if v := b.cspViolations(); len(v) > 0 {
		t.Errorf("CSP violations: %q", v)
	}
}
