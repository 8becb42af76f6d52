package panel

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// testIssuer is the relay's public URL in these tests.
const testIssuer = "https://relay.example"

// clientRedirect is where the test client's answers go; its own query
// must be kept.
const clientRedirect = "https://app.example/oauth/callback?tenant=7"

func newConsentFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, Config{Issuer: testIssuer})
}

// challenge is the PKCE S256 challenge of verifier.
func challenge(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// request keeps an authorization request for resource (an MCP URL) with
// scope, as the authorization endpoint does, made at now.
func (f *fixture) request(resource, scope string, now time.Time) string {
	f.t.Helper()
	id, err := f.state.CreateAuthRequest(store.AuthRequest{ClientID: "https://app.example/client.json", ClientName: "Example <App>",
		RedirectURI: clientRedirect, State: "st-1 &x", Challenge: challenge("verifier"), Resource: resource, Scope: scope}, now)
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

// consentForm is an Allow with these choices and the session's CSRF
// token.
func consentForm(csrf string, kv ...string) url.Values {
	v := url.Values{"csrf": {csrf}, "answer": {"allow"}, "principal": {"ci-bot"}, "days": {"7"}}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			v.Del(kv[i])
			continue
		}
		v.Add(kv[i], kv[i+1])
	}
	return v
}

// answered reads where an answer sent the browser: the client's redirect
// URI, its own query kept, with state and iss.
func answered(t *testing.T, resp *http.Response, page string) url.Values {
	t.Helper()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the answer: %d, want a redirect to the client\n%s", resp.StatusCode, page)
	}
	u, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || u.Scheme+"://"+u.Host+u.Path != "https://app.example/oauth/callback" {
		t.Fatalf("redirected to %q, want the client's redirect URI", resp.Header.Get("Location"))
	}
	q := u.Query()
	if q.Get("tenant") != "7" || q.Get("state") != "st-1 &x" || q.Get("iss") != testIssuer {
		t.Fatalf("the redirect's query %v lacks the URI's own, the state or the issuer", q)
	}
	return q
}

func (f *fixture) auditedTools() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.audited {
		out = append(out, e.Principal+" "+e.Tool+" "+e.Outcome)
	}
	return out
}

// TestConsentSignInAndBack: a person who is not signed in is sent to sign
// in and comes back to the consent page; one arriving from another site
// first gets a page that loads the address again from the panel (the
// browser sends the SameSite=Strict cookie only then), never a redirect
// to sign in; the page names the client, where the answer goes, and
// preselects the scope asked for, the person's own name and 30 days.
func TestConsentSignInAndBack(t *testing.T) {
	f := newConsentFixture(t)
	enrolled(t, f, "box")
	id := f.request(testIssuer+"/mcp", "run", time.Now())
	c := f.client()

	resp, page := f.do(c, "GET", ConsentPath+id, nil, map[string]string{"Sec-Fetch-Site": "cross-site"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Location") != "" ||
		!strings.Contains(page, `<meta http-equiv="refresh" content="0">`) || !strings.Contains(page, `href="`+ConsentPath+id+`"`) {
		t.Fatalf("arriving from another site: %d to %q\n%s", resp.StatusCode, resp.Header.Get("Location"), page)
	}
	wantHeaders(t, "the reload page", resp)
	want := LoginPath + "?next=" + url.QueryEscape(ConsentPath+id)
	for _, site := range []string{"same-origin", ""} {
		resp, _ := f.do(c, "GET", ConsentPath+id, nil, map[string]string{"Sec-Fetch-Site": site})
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
			t.Fatalf("signed out (Sec-Fetch-Site %q): %d to %q, want %q", site, resp.StatusCode, resp.Header.Get("Location"), want)
		}
	}
	if _, page := f.do(c, "GET", want, nil, nil); !strings.Contains(page, `name="next" value="`+ConsentPath+id+`"`) || !strings.Contains(page, `id="for-consent"`) {
		t.Fatalf("the sign-in page does not carry next, or does not say an app asks:\n%s", page)
	}
	if _, page := f.do(c, "GET", LoginPath+"?next="+url.QueryEscape(SecretPath+"ccp_x"), nil, nil); strings.Contains(page, `id="for-consent"`) {
		t.Error("the sign-in page for a secret prompt says an app asks to connect")
	}
	resp, _ = f.do(c, "POST", LoginPath, url.Values{"code": {f.code("alice")}, "next": {ConsentPath + id}}, nil)
	if resp.Header.Get("Location") != ConsentPath+id {
		t.Fatalf("after sign-in: to %q, want the consent page", resp.Header.Get("Location"))
	}
	long := ConsentPath + strings.Repeat("a", 128)
	if resp, _ := f.do(f.client(), "POST", LoginPath, url.Values{"code": {f.code("alice")}, "next": {long}}, nil); resp.Header.Get("Location") != long {
		t.Errorf("a 128-character ID: to %q", resp.Header.Get("Location"))
	}
	for _, next := range []string{ConsentPath, ConsentPath + "a/b", ConsentPath + "a.b", ConsentPath + strings.Repeat("a", 129), ConsentPath + "é"} {
		resp, _ := f.do(f.client(), "POST", LoginPath, url.Values{"code": {f.code("alice")}, "next": {next}}, nil)
		if resp.Header.Get("Location") != Prefix {
			t.Errorf("next %q: to %q, want %q", next, resp.Header.Get("Location"), Prefix)
		}
	}

	// Signed in, even a cross-site arrival gets the page itself.
	resp, page = f.do(c, "GET", ConsentPath+id, nil, map[string]string{"Sec-Fetch-Site": "cross-site"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the consent page: %d\n%s", resp.StatusCode, page)
	}
	for _, want := range []string{
		`<span id="client">Example &lt;App&gt;</span>`, `<strong id="redirect-host">app.example</strong>`,
		`<code id="client-id">https://app.example/client.json</code>`,
		`name="preset" value="run" checked`, `name="preset" value="read">`, `name="preset" value="all">`,
		`id="principal" name="principal" value="alice"`, `<option value="30" selected>30 days</option>`,
		`<option value="365">365 days</option>`, `name="device" value="*">`, `name="tool" value="files.write">`,
		`<form method="post" action="/panel/consent/` + id + `"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the consent page lacks %s", want)
		}
	}
	if strings.Contains(page, `value="366"`) || strings.Contains(page, "(an app on the computer") {
		t.Error("the page offers more than a year, or calls a remote client local")
	}
}

// TestConsentOffersUpToTheLongestConnection: the lifetimes offered rise
// to limits.OAuthConnectionMax, and the page offers nothing longer.
func TestConsentOffersUpToTheLongestConnection(t *testing.T) {
	if !slices.IsSorted(consentDays) || consentDays[0] != 1 || time.Duration(consentDays[len(consentDays)-1])*24*time.Hour != limits.OAuthConnectionMax ||
		!slices.Contains(consentDays, int(limits.OAuthConnectionTTL/(24*time.Hour))) {
		t.Errorf("the consent page offers %v days: from 1 to the longest connection, the default among them", consentDays)
	}
}

// TestConsentPreselectsDevicesItCanAllow: every device is ticked at
// first while a connection may name them all one by one; beyond that,
// none is (ticking them all could only be refused).
func TestConsentPreselectsDevicesItCanAllow(t *testing.T) {
	devs := make([]store.Device, store.MaxScopeEntries+1)
	for i := range devs {
		devs[i].ID = fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
	}
	if got := preselected(devs[:store.MaxScopeEntries]); len(got) != store.MaxScopeEntries || got[0] != devs[0].ID || got[len(got)-1] != devs[len(got)-1].ID {
		t.Errorf("%d devices: %d ticked", store.MaxScopeEntries, len(got))
	}
	if got := preselected(devs); len(got) != 0 {
		t.Errorf("%d devices: %d ticked", len(devs), len(got))
	}
}

// TestConsentPreselects: a client that asked for nothing gets read
// preselected; a loopback redirect is named as an app on this computer;
// a request for one device names it and offers no other.
func TestConsentPreselects(t *testing.T) {
	f := newConsentFixture(t)
	box, other := enrolled(t, f, "box"), enrolled(t, f, "other")
	c := f.signIn("alice")
	id, err := f.state.CreateAuthRequest(store.AuthRequest{ClientID: "ccc_0123456789abcdef0123456789abcdef", RedirectURI: "http://127.0.0.1:4711/cb",
		Challenge: challenge("v"), Resource: testIssuer + "/mcp/box"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, page := f.do(c, "GET", ConsentPath+id, nil, nil)
	for _, want := range []string{`name="preset" value="read" checked`, `name="preset" value="run">`, "An app that gave no name",
		`<strong id="redirect-host">127.0.0.1:4711</strong> (an app on the computer`, `<p id="one-device">Only <strong>box</strong>:`} {
		if !strings.Contains(page, want) {
			t.Errorf("the consent page lacks %s", want)
		}
	}
	if strings.Contains(page, `name="device"`) || strings.Contains(page, other.ID) || strings.Contains(page, box.ID) {
		t.Error("a one-device request offers devices to choose")
	}
	ghost := f.request(testIssuer+"/mcp/ghost/", "", time.Now())
	if _, page := f.do(c, "GET", ConsentPath+ghost, nil, nil); !strings.Contains(page, "<strong>ghost</strong> (no device of this relay has this name yet)") {
		t.Errorf("a request for a device the relay lacks:\n%s", page)
	}
	odd := f.request(testIssuer+"/elsewhere", "", time.Now())
	if resp, page := f.do(c, "GET", ConsentPath+odd, nil, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "names no MCP address") {
		t.Errorf("a request for no MCP address: %d", resp.StatusCode)
	}
	if resp, page := f.do(c, "POST", ConsentPath+odd, consentForm(f.csrf(c)), nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "names no MCP address") {
		t.Errorf("allowing a request for no MCP address: %d", resp.StatusCode)
	}
}

// TestConsentAllowMakesWhatThePageChose: the devices and tools the
// person narrowed to, the principal and the lifetime are what the code
// redeems into, whatever the client asked for; a one-device request
// gets that device whatever the form says; the answer goes back to the
// client with the code, its state and the issuer, and is audited without
// content.
func TestConsentAllowMakesWhatThePageChose(t *testing.T) {
	f := newConsentFixture(t)
	box, other := enrolled(t, f, "box"), enrolled(t, f, "other")
	c := f.signIn("alice")
	csrf := f.csrf(c)

	for name, tc := range map[string]struct {
		resource         string
		form             url.Values
		devices, tools   []string
		principal        string
		ttl              time.Duration
		auditedDeviceOne bool
	}{
		"narrowed to one device and single tools": {
			resource: testIssuer + "/mcp",
			form:     consentForm(csrf, "device", other.ID, "tool", "process.jobs", "tool", "files.read"),
			devices:  []string{other.ID}, tools: []string{"process.jobs", "files.read"}, principal: "ci-bot", ttl: 7 * 24 * time.Hour,
		},
		"a preset and a tool beyond it": {
			resource: testIssuer + "/mcp",
			form:     consentForm(csrf, "device", box.ID, "device", other.ID, "preset", "read", "tool", "files.write", "tool", "process.jobs", "days", "", "days", "365"),
			devices:  []string{box.ID, other.ID},
			tools: []string{"process.jobs", "process.list", "process.status", "process.output", "process.wait",
				"process.screen", "files.list", "files.read", "files.search", "system.metrics", "files.write"},
			principal: "ci-bot", ttl: limits.OAuthConnectionMax,
		},
		"every device and everything": {
			resource: testIssuer + "/mcp",
			form:     consentForm(csrf, "device", box.ID, "device", "*", "preset", "all", "preset", "run", "principal", "", "principal", " alice ", "days", "", "days", "1"),
			devices:  []string{"*"}, tools: []string{"*"}, principal: "alice", ttl: 24 * time.Hour,
		},
		"a device the relay does not have yet, by the name asked for": {
			resource: testIssuer + "/mcp/ghost",
			form:     consentForm(csrf, "device", box.ID, "preset", "read"),
			devices:  []string{"ghost"}, principal: "ci-bot", ttl: 7 * 24 * time.Hour,
			tools: []string{"process.jobs", "process.list", "process.status", "process.output", "process.wait",
				"process.screen", "files.list", "files.read", "files.search", "system.metrics"},
		},
		"the one device the client asked for": {
			resource: testIssuer + "/mcp/box",
			form:     consentForm(csrf, "device", other.ID, "device", "*", "preset", "run", "tool", "process.stop"),
			devices:  []string{box.ID}, principal: "ci-bot", ttl: 7 * 24 * time.Hour, auditedDeviceOne: true,
			tools: []string{"process.jobs", "process.list", "process.status", "process.output", "process.wait",
				"process.screen", "files.list", "files.read", "files.search", "system.metrics",
				"process.start", "process.run", "process.input", "process.resize", "process.stop", "process.forget"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f.mu.Lock()
			f.audited = nil
			f.mu.Unlock()
			id := f.request(tc.resource, "all", time.Now())
			resp, page := f.do(c, "POST", ConsentPath+id, tc.form, nil)
			q := answered(t, resp, page)
			if q.Get("error") != "" || !strings.HasPrefix(q.Get("code"), "cac_") {
				t.Fatalf("the redirect's query %v has no code", q)
			}
			now := time.Now()
			var seen *store.AuthCode
			tok, _, err := f.state.RedeemAuthCode(q.Get("code"), func(a *store.AuthCode) error { seen = a; return nil }, now)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(tok.Devices, tc.devices) || !slices.Equal(tok.Tools, tc.tools) || tok.Principal != tc.principal ||
				tok.Kind != store.TokenOAuth || tok.Admin != "alice" || tok.Client != "Example <App>" || tok.Resource != tc.resource {
				t.Fatalf("the connection: %+v\nwant devices %v, tools %v, principal %s", tok, tc.devices, tc.tools, tc.principal)
			}
			if d := tok.ExpiresAt.Sub(now); d > tc.ttl || d < tc.ttl-time.Minute {
				t.Errorf("the connection lasts %v, want %v", d, tc.ttl)
			}
			if seen.RedirectURI != clientRedirect || seen.Challenge != challenge("verifier") {
				t.Errorf("the code stands for %+v", seen)
			}
			if got := f.auditedTools(); !slices.Equal(got, []string{"admin:alice panel.consent_given ok"}) {
				t.Errorf("audited %q", got)
			}
			f.mu.Lock()
			e := f.audited[0]
			f.mu.Unlock()
			if tc.auditedDeviceOne && e.Device != box.ID || !tc.auditedDeviceOne && e.Device != "" {
				t.Errorf("the audit entry names device %q", e.Device)
			}
			// Answered: the page is gone, and a second answer changes nothing.
			if resp, page := f.do(c, "POST", ConsentPath+id, tc.form, nil); resp.StatusCode != http.StatusNotFound || resp.Header.Get("Location") != "" ||
				!strings.Contains(page, "already answered or expired") {
				t.Errorf("a second answer: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
			}
		})
	}
}

// TestConsentRefusesWhatItCannotAllow: an admin's principal, a principal
// a client token cannot take, a lifetime beyond the bound, a device or a
// tool the page did not offer, and nothing chosen are each refused with
// the page again, saying why; nothing is allowed and the request still
// waits for an answer.
func TestConsentRefusesWhatItCannotAllow(t *testing.T) {
	f := newConsentFixture(t)
	box := enrolled(t, f, "box")
	c := f.signIn("alice")
	csrf := f.csrf(c)
	id := f.request(testIssuer+"/mcp", "read", time.Now())
	for name, tc := range map[string]struct {
		form url.Values
		says string
	}{
		"an admin principal":         {consentForm(csrf, "device", box.ID, "preset", "read", "principal", "", "principal", "admin:alice"), "an app never acts as a panel admin (admin:…)"},
		"the admin prefix alone":     {consentForm(csrf, "device", box.ID, "preset", "read", "principal", "", "principal", "admin:"), "an app never acts as a panel admin"},
		"local":                      {consentForm(csrf, "device", box.ID, "preset", "read", "principal", "", "principal", "local"), "not &#34;local&#34;"},
		"no principal":               {consentForm(csrf, "device", box.ID, "preset", "read", "principal", ""), "the principal is 1 to 64"},
		"a principal with a space":   {consentForm(csrf, "device", box.ID, "preset", "read", "principal", "", "principal", "a b"), "the principal is 1 to 64"},
		"a year and a day":           {consentForm(csrf, "device", box.ID, "preset", "read", "days", "", "days", "366"), "a connection lasts 1 to 365 days"},
		"no days":                    {consentForm(csrf, "device", box.ID, "preset", "read", "days", "", "days", "0"), "a connection lasts 1 to 365 days"},
		"days that are no number":    {consentForm(csrf, "device", box.ID, "preset", "read", "days", "", "days", "30d"), "a connection lasts 1 to 365 days"},
		"no device":                  {consentForm(csrf, "preset", "read"), "choose at least one device"},
		"a device the relay lacks":   {consentForm(csrf, "device", box.ID, "device", "box", "preset", "read"), "not one of this relay&#39;s"},
		"no power":                   {consentForm(csrf, "device", box.ID), "choose at least one power or tool"},
		"a preset the page lacks":    {consentForm(csrf, "device", box.ID, "preset", "root"), "a power chosen is not one the page offers"},
		"a tool the page lacks":      {consentForm(csrf, "device", box.ID, "tool", "process.*"), "a tool chosen is not one the page offers"},
		"a tool the table lacks too": {consentForm(csrf, "device", box.ID, "preset", "read", "tool", "devices.list"), "a tool chosen is not one the page offers"},
	} {
		resp, page := f.do(c, "POST", ConsentPath+id, tc.form, nil)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" || !strings.Contains(page, "Nothing was allowed: ") ||
			!strings.Contains(page, tc.says) || !strings.Contains(page, "The app still waits for your answer.") {
			t.Errorf("%s: %d to %q\n%s", name, resp.StatusCode, resp.Header.Get("Location"), page)
		}
		if _, err := f.state.AuthRequest(id, time.Now()); err != nil {
			t.Fatalf("%s: the request no longer waits: %v", name, err)
		}
	}
	// The page shown again keeps what the person chose.
	_, page := f.do(c, "POST", ConsentPath+id, consentForm(csrf, "device", box.ID, "tool", "files.read", "principal", "", "principal", "admin:x", "days", "", "days", "90"), nil)
	for _, want := range []string{`name="device" value="` + box.ID + `" checked`, `name="tool" value="files.read" checked`, `<details open>`,
		`name="preset" value="read">`, `value="admin:x"`, `<option value="90" selected>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page shown again lacks %s", want)
		}
	}
	for _, e := range f.auditedTools() {
		if e != "admin:alice panel.consent_given failed" && e != "admin:alice panel.sign_in ok" {
			t.Errorf("audited %q", e)
		}
	}
}

// TestConsentDenySendsAccessDenied: Deny answers the request and sends
// the browser back with access_denied, the state and the issuer, and no
// code; so does a form that says neither.
func TestConsentDenySendsAccessDenied(t *testing.T) {
	f := newConsentFixture(t)
	c := f.signIn("alice")
	csrf := f.csrf(c)
	for _, answer := range []string{"deny", ""} {
		id := f.request(testIssuer+"/mcp/box", "run", time.Now())
		resp, page := f.do(c, "POST", ConsentPath+id, url.Values{"csrf": {csrf}, "answer": {answer}, "principal": {"admin:x"}}, nil)
		q := answered(t, resp, page)
		if q.Get("error") != "access_denied" || q.Has("code") {
			t.Fatalf("answer %q: the redirect's query %v", answer, q)
		}
		if _, err := f.state.AuthRequest(id, time.Now()); !errcode.Is(err, errcode.NotFound) {
			t.Errorf("a denied request still waits: %v", err)
		}
		if resp, _ := f.do(c, "POST", ConsentPath+id, url.Values{"csrf": {csrf}, "answer": {"deny"}}, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("denying twice: %d", resp.StatusCode)
		}
	}
	got := f.auditedTools()
	if n := len(slices.DeleteFunc(got, func(s string) bool { return s != "admin:alice panel.consent_denied ok" })); n != 2 {
		t.Errorf("%d consent_denied entries, want 2: %q", n, f.auditedTools())
	}
}

// TestConsentGoneRequestsArePlainPages: an expired, answered or unknown
// request is one plain page, never a redirect to the client, on GET and
// POST alike; a relay without a public URL serves no consent.
func TestConsentGoneRequestsArePlainPages(t *testing.T) {
	f := newConsentFixture(t)
	c := f.signIn("alice")
	csrf := f.csrf(c)
	expired := f.request(testIssuer+"/mcp", "", time.Now().Add(-limits.OAuthRequestTTL-time.Second))
	answered := f.request(testIssuer+"/mcp", "", time.Now())
	if _, err := f.state.DenyAuthRequest(answered, time.Now()); err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]string{"expired": expired, "answered": answered, "unknown": "car_" + strings.Repeat("A", 43), "malformed": "x"} {
		for _, method := range []string{"GET", "POST"} {
			var form url.Values
			if method == "POST" {
				form = url.Values{"csrf": {csrf}, "answer": {"deny"}}
			}
			resp, page := f.do(c, method, ConsentPath+id, form, nil)
			if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Location") != "" ||
				!strings.Contains(page, "This request to connect an app is unknown, already answered or expired. Start again from the app.") {
				t.Errorf("%s %s request: %d to %q", method, name, resp.StatusCode, resp.Header.Get("Location"))
			}
		}
	}

	none := newFixture(t, false)
	id, err := none.state.CreateAuthRequest(store.AuthRequest{ClientID: "x", RedirectURI: clientRedirect, Challenge: challenge("v"), Resource: "https://r/mcp"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	nc := none.signIn("alice")
	for _, method := range []string{"GET", "POST"} {
		var form url.Values
		if method == "POST" {
			form = url.Values{"csrf": {none.csrf(nc)}, "answer": {"deny"}}
		}
		resp, page := none.do(nc, method, ConsentPath+id, form, nil)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(page, "does not serve OAuth sign-ins") {
			t.Errorf("%s without an issuer: %d", method, resp.StatusCode)
		}
	}
	if _, err := none.state.AuthRequest(id, time.Now()); err != nil {
		t.Errorf("a relay without an issuer answered the request: %v", err)
	}
}

// TestConsentAnswersNeedSessionTokenAndOrigin: an answer without a
// session, without or with another session's CSRF token, or that the
// browser marks as cross-site is refused; the request still waits.
func TestConsentAnswersNeedSessionTokenAndOrigin(t *testing.T) {
	f := newConsentFixture(t)
	box := enrolled(t, f, "box")
	c := f.signIn("alice")
	stale := f.csrf(f.signIn("alice"))
	id := f.request(testIssuer+"/mcp", "", time.Now())
	allow := func(csrf string) url.Values { return consentForm(csrf, "device", box.ID, "preset", "read") }
	for name, tc := range map[string]struct {
		c    *http.Client
		form url.Values
		hdr  map[string]string
	}{
		"no session":           {f.client(), allow(f.csrf(c)), nil},
		"no CSRF token":        {c, allow(""), nil},
		"another session's":    {c, allow(stale), nil},
		"a cross-site request": {c, allow(f.csrf(c)), map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"a deny, cross-site":   {c, url.Values{"csrf": {f.csrf(c)}, "answer": {"deny"}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		if resp, _ := f.do(tc.c, "POST", ConsentPath+id, tc.form, tc.hdr); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Location") != "" {
			t.Errorf("%s: %d to %q, want 403", name, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if _, err := f.state.AuthRequest(id, time.Now()); err != nil {
		t.Fatalf("a refused answer answered the request: %v", err)
	}
	if resp, page := f.do(c, "POST", ConsentPath+id, allow(f.csrf(c)), nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the panel's own answer: %d\n%s", resp.StatusCode, page)
	}
}

// TestTokensPageListsConnections: an OAuth connection is on the Tokens
// page beside static tokens, with its kind, client, devices by name,
// created and last used, and revocable there.
func TestTokensPageListsConnections(t *testing.T) {
	f := newConsentFixture(t)
	box := enrolled(t, f, "box")
	c := f.signIn("alice")
	csrf := f.csrf(c)
	if resp, _ := f.do(c, "POST", Prefix+"tokens", url.Values{"csrf": {csrf}, "name": {"ci"}, "devices": {"box"}, "tools": {"*"}, "ttl": {"1h"}}, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("token create: %d", resp.StatusCode)
	}
	id := f.request(testIssuer+"/mcp/box", "read", time.Now())
	resp, page := f.do(c, "POST", ConsentPath+id, consentForm(csrf, "tool", "process.jobs"), nil)
	code := answered(t, resp, page).Get("code")
	tok, _, err := f.state.RedeemAuthCode(code, func(*store.AuthCode) error { return nil }, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	row := func() string {
		t.Helper()
		_, page := f.do(c, "GET", Prefix+"tokens", nil, nil)
		i := strings.Index(page, `<tr data-token="`+tok.ID+`">`)
		if i < 0 {
			t.Fatalf("the Tokens page lacks the connection:\n%s", page)
		}
		end := strings.Index(page[i:], "</tr>")
		return page[i : i+end]
	}
	r := row()
	for _, want := range []string{`<td data-label="Kind" data-field="kind">oauth</td>`,
		`<span title="client https://app.example/client.json, allowed by admin:alice">Example &lt;App&gt;</span>`,
		`<span title="device ` + box.ID + `">box</span>`, `<td data-label="Principal">ci-bot</td>`, `process.jobs`,
		`<td data-label="Last used" data-field="used"><span class="off">never</span>`, `data-label="Created"><time`, `Revoke`} {
		if !strings.Contains(r, want) {
			t.Errorf("the connection's row lacks %s:\n%s", want, r)
		}
	}
	if err := f.state.AppendAudit([]store.AuditEntry{{At: time.Now().Add(-3 * time.Minute), Principal: "ci-bot", TokenID: tok.ID, Tool: "process.jobs", Outcome: store.AuditOK}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if r := row(); !strings.Contains(r, `data-field="used"><time`) || !strings.Contains(r, "3 min ago") {
		t.Errorf("the connection's row after a call:\n%s", r)
	}
	_, page = f.do(c, "GET", Prefix+"tokens", nil, nil)
	if !strings.Contains(page, `data-field="kind">static</td>`) || !strings.Contains(page, `<td data-label="Devices" data-field="devices" class="wrap">box</td>`) {
		t.Errorf("the static token's row:\n%s", page)
	}
	if resp, _ := f.do(c, "POST", Prefix+"tokens/"+tok.ID+"/revoke", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	if r := row(); !strings.Contains(r, "revoked") || strings.Contains(r, "Revoke") {
		t.Errorf("the revoked connection's row:\n%s", r)
	}
}

// stepClock is a clock that moves on by step each time it is read.
type stepClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

func (c *stepClock) set(step time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = step
	return c.t
}

// TestConsentExpiringWhileAnswered: a request that expires between the
// page reading it and the answer is the plain page too, never a redirect,
// and the attempt is audited as failed.
func TestConsentExpiringWhileAnswered(t *testing.T) {
	clock := &stepClock{t: time.Now()}
	f := newFixtureWith(t, Config{Issuer: testIssuer, Now: clock.now})
	c := f.signIn("alice")
	csrf := f.csrf(c)
	for _, answer := range []string{"allow", "deny"} {
		// Each read of the clock is 4 min on: the session's check, the
		// request's read (8 min on, it waits), the answer (12 min on).
		id := f.request(testIssuer+"/mcp/box", "read", clock.set(4*time.Minute))
		resp, page := f.do(c, "POST", ConsentPath+id, url.Values{"csrf": {csrf}, "answer": {answer}, "preset": {"read"}, "principal": {"bob"}, "days": {"1"}}, nil)
		clock.set(0)
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Location") != "" || !strings.Contains(page, "already answered or expired") {
			t.Errorf("%s as the request expires: %d to %q", answer, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var failed []string
	for _, e := range f.audited {
		if e.Outcome == store.AuditFailed {
			failed = append(failed, e.Tool+" "+e.Code)
		}
	}
	if !slices.Equal(failed, []string{"panel.consent_given not_found", "panel.consent_denied not_found"}) {
		t.Errorf("audited failures %q", failed)
	}
}

// TestConsentUnreadableRedirect: a request whose redirect URI cannot be
// read is a plain page on GET and POST, and waits on.
func TestConsentUnreadableRedirect(t *testing.T) {
	f := newConsentFixture(t)
	c := f.signIn("alice")
	id, err := f.state.CreateAuthRequest(store.AuthRequest{ClientID: "x", RedirectURI: "https://app.example/%zz", Challenge: challenge("v"),
		Resource: testIssuer + "/mcp"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{"GET", "POST"} {
		var form url.Values
		if method == "POST" {
			form = url.Values{"csrf": {f.csrf(c)}, "answer": {"deny"}}
		}
		if resp, page := f.do(c, method, ConsentPath+id, form, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "return address cannot be read") {
			t.Errorf("%s: %d", method, resp.StatusCode)
		}
	}
	if _, err := f.state.AuthRequest(id, time.Now()); err != nil {
		t.Errorf("the request was answered: %v", err)
	}
}

// TestResourceDevice: an MCP URL names one device, all of them, or is
// none of the relay's.
func TestResourceDevice(t *testing.T) {
	for resource, want := range map[string]struct {
		device  string
		all, ok bool
	}{
		"https://r.example/mcp":                {all: true, ok: true},
		"https://r.example/mcp/":               {all: true, ok: true},
		"https://r.example/base/mcp":           {all: true, ok: true},
		"https://r.example/mcp/build-box":      {device: "build-box", ok: true},
		"https://r.example/mcp/build-box/":     {device: "build-box", ok: true},
		"https://r.example/base/mcp/web_1.x":   {device: "web_1.x", ok: true},
		"https://r.example/mcp/a/b":            {},
		"https://r.example/mcp/..":             {},
		"https://r.example/mcp/bad%20name":     {},
		"https://r.example/":                   {},
		"https://r.example/mcpx":               {},
		"https://r.example/other/box":          {},
		"%zz":                                  {},
		"https://r.example/mcp/" + "x%2Fy":     {},
		"https://r.example/mcp/" + "%E2%80%AE": {},
	} {
		dev, all, ok := resourceDevice(resource)
		if dev != want.device || all != want.all || ok != want.ok {
			t.Errorf("%s: %q %v %v, want %+v", resource, dev, all, ok, want)
		}
	}
}

// FuzzResourceDevice: whatever the resource, a device it names is one
// name of the relay's, and the URL's path ends in /mcp/<it>.
func FuzzResourceDevice(f *testing.F) {
	for _, s := range []string{"https://r.example/mcp", "https://r.example/mcp/box", "https://r.example/mcp/a/b", "%zz", "/mcp/../mcp/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, resource string) {
		dev, all, ok := resourceDevice(resource)
		switch {
		case !ok && (dev != "" || all):
			t.Fatalf("%q: refused, yet %q %v", resource, dev, all)
		case all && dev != "":
			t.Fatalf("%q: every device and %q", resource, dev)
		case ok && !all:
			u, _ := url.Parse(resource)
			if !store.ValidName(dev) || !strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/mcp/"+dev) {
				t.Fatalf("%q: device %q", resource, dev)
			}
		}
	})
}

// FuzzAfterSignIn: a sign-in continues to the Overview, or to one secret
// prompt's or consent page, never anywhere else.
func FuzzAfterSignIn(f *testing.F) {
	for _, s := range []string{ConsentPath + "car_x", SecretPath + "ccp_y", "//evil.example", ConsentPath + "a/../b", Prefix + "tokens"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := afterSignIn(next)
		if got == Prefix {
			return
		}
		id, ok := strings.CutPrefix(got, ConsentPath)
		if !ok {
			id, ok = strings.CutPrefix(got, SecretPath)
		}
		if got != next || !ok || id == "" || strings.ContainsAny(id, "/\\?#%.:") || strings.IndexFunc(id, func(r rune) bool { return r > 0x7f }) >= 0 {
			t.Fatalf("next %q continues to %q", next, got)
		}
	})
}

// TestConsentPreselection: a client that asked for presets has them
// ticked; one that asked for nothing, or for every scope the relay names
// (what MCP clients ask for when they copy a 401's scope), gets reading
// only, and the person ticks more.
func TestConsentPreselection(t *testing.T) {
	f := newConsentFixture(t)
	enrolled(t, f, "box")
	c := f.client()
	f.do(c, "POST", LoginPath, url.Values{"code": {f.code("alice")}}, nil)
	for scope, want := range map[string][]string{
		"":                   {"read"},
		"read run write all": {"read"},
		"run write":          {"run", "write"},
		"all":                {"all"},
		"read run write":     {"read", "run", "write"},
	} {
		_, page := f.do(c, "GET", ConsentPath+f.request(testIssuer+"/mcp", scope, time.Now()), nil, nil)
		for _, p := range []string{"read", "run", "write", "all"} {
			ticked := strings.Contains(page, `name="preset" value="`+p+`" checked`)
			if ticked != slices.Contains(want, p) {
				t.Errorf("scope %q: preset %s ticked %v", scope, p, ticked)
			}
		}
	}
}

// TestConsentOffersDevicesInGoodStanding: a revoked device is neither
// offered nor ticked on the consent page, nor taken when a form names it;
// the devices offered list the connected ones first, each part by name.
func TestConsentOffersDevicesInGoodStanding(t *testing.T) {
	f := newConsentFixture(t)
	gone := enrolled(t, f, "gone")
	idle := enrolled(t, f, "a-idle")
	live := enrolled(t, f, "z-live")
	if _, _, err := f.state.RevokeDevice(gone.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := f.state.JoinReplica(store.Replica{ID: "r1", Name: "r1", Address: "http://127.0.0.1:1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.state.TakeLink(live.ID, "r1", "", time.Now()); err != nil || !ok {
		t.Fatalf("TakeLink: %v %v", ok, err)
	}
	c := f.client()
	f.do(c, "POST", LoginPath, url.Values{"code": {f.code("alice")}}, nil)
	id := f.request(testIssuer+"/mcp", "", time.Now())
	_, page := f.do(c, "GET", ConsentPath+id, nil, nil)
	if strings.Contains(page, gone.ID) || strings.Contains(page, "> gone") {
		t.Errorf("the revoked device is offered:\n%s", page)
	}
	i, j := strings.Index(page, `value="`+live.ID+`" checked`), strings.Index(page, `value="`+idle.ID+`" checked`)
	if i < 0 || j < 0 || i > j {
		t.Errorf("want the connected z-live ticked before a-idle (at %d and %d):\n%s", i, j, page)
	}
	resp, page := f.do(c, "POST", ConsentPath+id, url.Values{"csrf": {f.csrf(c)}, "answer": {"allow"}, "device": {gone.ID},
		"preset": {"read"}, "principal": {"alice"}, "days": {"30"}}, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "a device chosen is not one of this relay&#39;s") {
		t.Errorf("a form naming the revoked device: %d\n%s", resp.StatusCode, page)
	}
}
