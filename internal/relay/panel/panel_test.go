package panel

import (
	"github.com/commandcore/commandcore/internal/isolation"

	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// devices answers the panel's device calls as a test says: fn, or wait
// for a call that lasts until the panel ends it (a long poll).
type devices struct {
	mu    sync.Mutex
	calls []string
	fn    func(tool string, args json.RawMessage) (json.RawMessage, error)
	wait  func(ctx context.Context, tool string, args json.RawMessage) (json.RawMessage, error)
	// updateErr, when set, is UpdateAgent's answer.
	updateErr error
}

func (d *devices) CallAsAdmin(ctx context.Context, admin, device, tool string, args json.RawMessage) (json.RawMessage, error) {
	d.mu.Lock()
	d.calls = append(d.calls, admin+" "+device+" "+tool)
	fn, wait := d.fn, d.wait
	d.mu.Unlock()
	if wait != nil {
		return wait(ctx, tool, args)
	}
	if fn == nil {
		return nil, errcode.New(errcode.DeviceOffline, "offline")
	}
	return fn(tool, args)
}

// UpdateAgent records the request; an agent of a device the test does
// not answer for is offline.
func (d *devices) UpdateAgent(ctx context.Context, device string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, "update "+device)
	if d.updateErr != nil {
		return d.updateErr
	}
	if d.fn == nil {
		return errcode.New(errcode.DeviceOffline, "offline")
	}
	return nil
}

// fixture is a panel over a real relay state on SQLite.
type fixture struct {
	t       testing.TB
	state   *store.Store
	srv     *httptest.Server
	devices *devices
	mu      sync.Mutex
	audited []store.AuditEntry
}

func newFixture(t testing.TB, secure bool) *fixture {
	t.Helper()
	return newFixtureWith(t, Config{Secure: secure})
}

// newFixtureWith is a panel with cfg over a new state, its audit kept.
func newFixtureWith(t testing.TB, cfg Config) *fixture {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fixture{t: t, state: st, devices: &devices{}}
	cfg.State, cfg.Devices = st, f.devices
	cfg.Audit = func(e store.AuditEntry) { f.mu.Lock(); f.audited = append(f.audited, e); f.mu.Unlock() }
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(p.Handler())
	t.Cleanup(f.srv.Close)
	return f
}

// client is a browser without redirects followed, with a cookie jar.
func (f *fixture) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (f *fixture) code(admin string) string {
	f.t.Helper()
	code, err := f.state.CreateSignIn(admin, limits.SignInCodeTTL, time.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	return code
}

func (f *fixture) do(c *http.Client, method, path string, form url.Values, hdr map[string]string) (*http.Response, string) {
	f.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, f.srv.URL+path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// signIn signs a new browser in as admin and returns it.
func (f *fixture) signIn(admin string) *http.Client {
	f.t.Helper()
	c := f.client()
	resp, _ := f.do(c, "POST", LoginPath, url.Values{"code": {f.code(admin)}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != Prefix {
		f.t.Fatalf("sign-in: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	return c
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf is the CSRF token a signed-in page carries.
func (f *fixture) csrf(c *http.Client) string {
	f.t.Helper()
	_, page := f.do(c, "GET", Prefix+"tokens", nil, nil)
	m := csrfInput.FindStringSubmatch(page)
	if m == nil {
		f.t.Fatalf("no CSRF token on the tokens page:\n%s", page)
	}
	return m[1]
}

func wantHeaders(t *testing.T, what string, resp *http.Response) {
	t.Helper()
	for k, v := range map[string]string{
		"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
	} {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s: %s is %q, want %q", what, k, got, v)
		}
	}
}

// TestEveryAnswerCarriesTheSecurityHeaders: pages, assets, redirects and
// refusals all carry the CSP, nosniff and no-referrer.
func TestEveryAnswerCarriesTheSecurityHeaders(t *testing.T) {
	f := newFixture(t, false)
	anon, admin := f.client(), f.signIn("alice")
	for _, path := range []string{"", "devices", "tokens", "enroll", "audit", "login", "static/panel.css", "static/panel.js", "nope"} {
		for name, c := range map[string]*http.Client{"anonymous": anon, "signed in": admin} {
			resp, _ := f.do(c, "GET", Prefix+path, nil, nil)
			wantHeaders(t, name+" GET /panel/"+path, resp)
		}
	}
	resp, _ := f.do(anon, "POST", Prefix+"tokens", url.Values{"name": {"x"}}, nil)
	wantHeaders(t, "refused POST", resp)
	resp, _ = f.do(anon, "GET", Prefix+"static/panel.js", nil, nil)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("panel.js is served as %q", ct)
	}
}

// TestSignInURLWorksOnce: opening the URL does not use the code (a link
// preview must not spend it); the button does, once; a second use gets
// the uniform refusal; the cookie is HttpOnly and SameSite=Strict, Secure
// under TLS; pages without a session send the browser to sign in.
func TestSignInURLWorksOnce(t *testing.T) {
	for _, secure := range []bool{false, true} {
		f := newFixture(t, secure)
		code := f.code("alice")
		c := f.client()
		resp, page := f.do(c, "GET", LoginPath+"?code="+code, nil, nil)
		if resp.StatusCode != 200 || !strings.Contains(page, `value="`+code+`"`) {
			t.Fatalf("the login page: %d\n%s", resp.StatusCode, page)
		}
		resp, _ = f.do(c, "POST", LoginPath, url.Values{"code": {code}}, nil)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("first use: %d", resp.StatusCode)
		}
		ck := resp.Cookies()
		if len(ck) != 1 || ck[0].Name != CookieName || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode ||
			ck[0].Secure != secure || ck[0].Path != Prefix {
			t.Fatalf("session cookie %+v (secure panel %v)", ck, secure)
		}
		if resp, page := f.do(c, "GET", Prefix, nil, nil); resp.StatusCode != 200 || !strings.Contains(page, "alice") {
			t.Fatalf("overview after sign-in: %d", resp.StatusCode)
		}
		other := f.client()
		resp, page = f.do(other, "POST", LoginPath, url.Values{"code": {code}}, nil)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(page, "invalid, used or expired") || len(resp.Cookies()) != 0 {
			t.Fatalf("second use: %d, cookies %v", resp.StatusCode, resp.Cookies())
		}
		_, wrong := f.do(other, "POST", LoginPath, url.Values{"code": {"ccA-AAAAAAAAAAAAAAAAAAAA"}}, nil)
		if wrong != page {
			t.Error("a wrong code and a used one are refused differently")
		}
		for _, path := range []string{"", "devices", "tokens", "audit", "devices/x", "events/devices"} {
			resp, _ := f.do(other, "GET", Prefix+path, nil, nil)
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != LoginPath {
				t.Errorf("GET /panel/%s without a session: %d to %q", path, resp.StatusCode, resp.Header.Get("Location"))
			}
		}
	}
}

// TestSignInAlwaysMakesANewSession: a session ID planted in the browser
// before sign-in is not the one after, and is ended.
func TestSignInAlwaysMakesANewSession(t *testing.T) {
	f := newFixture(t, false)
	_, planted, err := f.state.SignIn(f.code("mallory"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := f.client()
	u, _ := url.Parse(f.srv.URL + Prefix)
	c.Jar.SetCookies(u, []*http.Cookie{{Name: CookieName, Value: planted, Path: Prefix}})
	resp, _ := f.do(c, "POST", LoginPath, url.Values{"code": {f.code("alice")}}, nil)
	ck := resp.Cookies()
	if len(ck) != 1 || ck[0].Value == planted {
		t.Fatalf("sign-in kept the planted session: %+v", ck)
	}
	if _, err := f.state.AuthSession(planted, time.Now()); !errcode.Is(err, errcode.PermissionDenied) {
		t.Errorf("the planted session lives on: %v", err)
	}
}

// TestChangesNeedSessionTokenAndOrigin: a POST without a session, without
// or with a stale CSRF token, or marked cross-site by the browser changes
// nothing; the panel's own form does.
func TestChangesNeedSessionTokenAndOrigin(t *testing.T) {
	f := newFixture(t, false)
	c := f.signIn("alice")
	token := f.csrf(c)
	stale := f.csrf(f.signIn("alice"))
	form := func(csrf string) url.Values {
		v := url.Values{"name": {"ci"}, "devices": {"*"}, "tools": {"process.*"}, "ttl": {"1h"}}
		if csrf != "" {
			v.Set("csrf", csrf)
		}
		return v
	}
	for name, tc := range map[string]struct {
		c    *http.Client
		form url.Values
		hdr  map[string]string
	}{
		"no session":           {f.client(), form(token), nil},
		"no token":             {c, form(""), nil},
		"another session's":    {c, form(stale), nil},
		"cross-site form post": {c, form(token), map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}},
		"foreign origin":       {c, form(token), map[string]string{"Origin": "https://evil.example"}},
		"same-site elsewhere":  {c, form(token), map[string]string{"Sec-Fetch-Site": "same-site"}},
		"null origin":          {c, form(token), map[string]string{"Origin": "null"}},
	} {
		resp, _ := f.do(tc.c, "POST", Prefix+"tokens", tc.form, tc.hdr)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, resp.StatusCode)
		}
	}
	if toks, _ := f.state.Tokens(); len(toks) != 0 {
		t.Fatalf("a refused POST made %d tokens", len(toks))
	}
	// What Chromium sends for the panel's own form: under Referrer-Policy:
	// no-referrer its Origin is "null".
	resp, page := f.do(c, "POST", Prefix+"tokens", form(token), map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "null"})
	if resp.StatusCode != 200 {
		t.Fatalf("the panel's own form: %d\n%s", resp.StatusCode, page)
	}
	toks, _ := f.state.Tokens()
	if len(toks) != 1 || toks[0].Name != "ci" || strings.Join(toks[0].Tools, ",") != "process.*" {
		t.Fatalf("tokens after the form: %+v", toks)
	}
}

var bearerText = regexp.MustCompile(`cct_tok_[0-9a-f]{12}_[A-Za-z0-9_-]{43}`)

// TestTokenIsShownOnceAndWorks: the new token's secret is on the answer
// to the form only, it authenticates, and Revoke ends it.
func TestTokenIsShownOnceAndWorks(t *testing.T) {
	f := newFixture(t, false)
	c := f.signIn("alice")
	_, page := f.do(c, "POST", Prefix+"tokens", url.Values{"csrf": {f.csrf(c)}, "name": {"ci"}, "principal": {"ci-bot"}, "ttl": {"2h"}}, nil)
	secret := bearerText.FindString(page)
	if secret == "" {
		t.Fatalf("the created token is not shown:\n%s", page)
	}
	tok, err := f.state.AuthToken(secret, time.Now())
	if err != nil || tok.Principal != "ci-bot" {
		t.Fatalf("the shown token: %+v, %v", tok, err)
	}
	for _, path := range []string{"tokens", "", "audit"} {
		if _, again := f.do(c, "GET", Prefix+path, nil, nil); bearerText.MatchString(again) || strings.Contains(again, secret) {
			t.Errorf("/panel/%s shows a token secret after creation", path)
		}
	}
	if resp, _ := f.do(c, "POST", Prefix+"tokens/"+tok.ID+"/revoke", url.Values{"csrf": {f.csrf(c)}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	if _, err := f.state.AuthToken(secret, time.Now()); !errcode.Is(err, errcode.PermissionDenied) {
		t.Errorf("a token revoked in the panel still authenticates: %v", err)
	}
	if resp, _ := f.do(c, "POST", Prefix+"tokens", url.Values{"csrf": {f.csrf(c)}, "name": {"bad name"}, "ttl": {"1h"}}, nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("an invalid token name: %d", resp.StatusCode)
	}
	if resp, _ := f.do(c, "POST", Prefix+"tokens", url.Values{"csrf": {f.csrf(c)}, "name": {"x"}, "ttl": {"forever"}}, nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("an invalid lifetime: %d", resp.StatusCode)
	}
}

// TestRevokedAdminIsSignedOutAtOnce: the next request of a revoked admin's
// session is refused; signing out ends the session too.
func TestRevokedAdminIsSignedOutAtOnce(t *testing.T) {
	f := newFixture(t, false)
	c := f.signIn("alice")
	token := f.csrf(c)
	if err := f.state.RevokeAdmin("alice", time.Now()); err != nil {
		t.Fatal(err)
	}
	if resp, _ := f.do(c, "GET", Prefix, nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a revoked admin's page: %d", resp.StatusCode)
	}
	if resp, _ := f.do(c, "POST", Prefix+"enroll", url.Values{"csrf": {token}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a revoked admin's POST: %d", resp.StatusCode)
	}
	b := f.signIn("bob")
	if resp, _ := f.do(b, "POST", Prefix+"logout", url.Values{"csrf": {f.csrf(b)}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", resp.StatusCode)
	}
	if resp, _ := f.do(b, "GET", Prefix, nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after sign-out: %d", resp.StatusCode)
	}
}

// TestPanelActionsAreAuditedWithoutContent: each change is an audit entry
// by admin:<name>, naming the action and outcome, never what was typed.
func TestPanelActionsAreAuditedWithoutContent(t *testing.T) {
	f := newFixture(t, false)
	c := f.signIn("alice")
	f.do(c, "POST", Prefix+"tokens", url.Values{"csrf": {f.csrf(c)}, "name": {"secret-project"}, "ttl": {"1h"}}, nil)
	f.do(c, "POST", Prefix+"enroll", url.Values{"csrf": {f.csrf(c)}, "name": {"laptop-of-bob"}}, nil)
	f.do(c, "POST", Prefix+"tokens/tok_000000000000/revoke", url.Values{"csrf": {f.csrf(c)}}, nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	var got []string
	for _, e := range f.audited {
		got = append(got, e.Principal+" "+e.Tool+" "+e.Outcome+" "+e.Code)
		raw, _ := json.Marshal(e)
		if strings.Contains(string(raw), "secret-project") || strings.Contains(string(raw), "laptop-of-bob") {
			t.Errorf("the audit holds what was typed: %s", raw)
		}
	}
	want := []string{"admin:alice panel.sign_in ok ", "admin:alice panel.token_create ok ",
		"admin:alice panel.enroll_code ok ", "admin:alice panel.token_revoke failed not_found"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("audited:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestEnrollmentShowsTheLineToPaste: the code made works once; the line
// that installs the agent downloads from a live replica, and the enroll
// line names every live replica.
func TestEnrollmentShowsTheLineToPaste(t *testing.T) {
	f := newFixture(t, false)
	for _, r := range []store.Replica{{ID: "r1", Name: "r1", Address: "https://r1.example"}} {
		if err := f.state.JoinReplica(r, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	c := f.signIn("alice")
	_, page := f.do(c, "POST", Prefix+"enroll", url.Values{"csrf": {f.csrf(c)}, "name": {"box"}, "ttl": {"10m"}}, nil)
	// The code is in the environment of the commands, never among their
	// arguments, where other local users would read it.
	m := regexp.MustCompile(`<pre id="enroll-line">COMMANDCORE_ENROLL_CODE=(ccE-[A-Z2-7]{20}) commandcore enroll --server https://r1.example</pre>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no enroll line:\n%s", page)
	}
	if want := `<pre id="install-line">curl --proto &#39;=https&#39; -fsSL https://r1.example/install.sh | COMMANDCORE_ENROLL_CODE=` + m[1] + ` sh</pre>`; !strings.Contains(page, want) {
		t.Fatalf("no install line %q:\n%s", want, page)
	}
	// The lifetime chosen, in the panel's words, and the form keeps it as
	// typed; never a Go duration such as 10m0s.
	if !strings.Contains(page, "the code works once, for 10 min;") || !strings.Contains(page, `name="ttl" value="10m"`) || strings.Contains(page, "0s") {
		t.Errorf("the code's lifetime is not shown as chosen:\n%s", page)
	}
	dev, _, _, err := f.state.Enroll(m[1], "other", time.Now())
	if err != nil || dev.Name != "box" {
		t.Fatalf("the shown code: %+v, %v", dev, err)
	}
	_, page = f.do(c, "GET", Prefix+"enroll", nil, nil)
	if !strings.Contains(page, `name="ttl" value="15m"`) {
		t.Errorf("the form's default lifetime is not 15m:\n%s", page)
	}
}

// TestTTLText: a lifetime is written as the form reads it back, in its
// largest whole unit.
func TestTTLText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		15 * time.Minute:                   "15m",
		90 * time.Minute:                   "90m",
		12 * time.Hour:                     "12h",
		24 * time.Hour:                     "1d",
		30 * 24 * time.Hour:                "30d",
		36 * time.Hour:                     "36h",
		90 * time.Second:                   "1m30s",
		time.Minute + 500*time.Millisecond: "1m0.5s",
	} {
		got := ttlText(d)
		if got != want {
			t.Errorf("ttlText(%v) = %q, want %q", d, got, want)
		}
		if back, err := parseTTL(got); err != nil || back != d {
			t.Errorf("%q reads back as %v, %v", got, back, err)
		}
	}
}

// TestInstallLineNamesThePublicURL: behind a load balancer the install
// line downloads from the relay's public URL, not from a replica's own
// address; the enroll line still names the replicas.
func TestInstallLineNamesThePublicURL(t *testing.T) {
	f := newFixtureWith(t, Config{PublicURL: "https://relay.example"})
	if err := f.state.JoinReplica(store.Replica{ID: "r1", Name: "r1", Address: "https://r1.internal:8440"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	c := f.signIn("alice")
	_, page := f.do(c, "POST", Prefix+"enroll", url.Values{"csrf": {f.csrf(c)}}, nil)
	m := regexp.MustCompile(`<pre id="enroll-line">COMMANDCORE_ENROLL_CODE=(ccE-[A-Z2-7]{20}) commandcore enroll --server https://r1.internal:8440</pre>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no enroll line:\n%s", page)
	}
	if want := `<pre id="install-line">curl --proto &#39;=https&#39; -fsSL https://relay.example/install.sh | COMMANDCORE_ENROLL_CODE=` + m[1] + ` sh</pre>`; !strings.Contains(page, want) {
		t.Fatalf("no install line %q:\n%s", want, page)
	}
}

// TestAuditPageFiltersAndPages: the page shows 50 entries, newest first,
// a link to the older ones that keeps the filter, and only what matches.
func TestAuditPageFiltersAndPages(t *testing.T) {
	f := newFixture(t, false)
	now := time.Now()
	var entries []store.AuditEntry
	for i := range 120 {
		entries = append(entries, store.AuditEntry{At: now, Principal: []string{"alice", "bob"}[i%2], Tool: "process.jobs", Outcome: store.AuditOK})
	}
	if err := f.state.AppendAudit(entries, now); err != nil {
		t.Fatal(err)
	}
	c := f.signIn("carol")
	_, page := f.do(c, "GET", Prefix+"audit?principal=bob", nil, nil)
	rows := regexp.MustCompile(`<tr>\s*<td data-label="#">(\d+)</td>`).FindAllStringSubmatch(page, -1)
	if len(rows) != auditRows || rows[0][1] != "120" || strings.Contains(page, ">alice</span></td>") {
		t.Fatalf("bob's first page: %d rows, first %v", len(rows), rows[:1])
	}
	older := regexp.MustCompile(`href="(/panel/audit\?[^"]+)" id="older"`).FindStringSubmatch(page)
	if older == nil || !strings.Contains(older[1], "principal=bob") {
		t.Fatalf("no older link keeping the filter:\n%s", page)
	}
	_, next := f.do(c, "GET", strings.ReplaceAll(older[1], "&amp;", "&"), nil, nil)
	rows = regexp.MustCompile(`<tr>\s*<td data-label="#">(\d+)</td>`).FindAllStringSubmatch(next, -1)
	if len(rows) != 10 || rows[0][1] != "20" {
		t.Fatalf("bob's second page: %d rows, first %v", len(rows), rows[:1])
	}
}

// TestDevicePageSaysWhyItHasNoJobs: a device whose owner refuses admins
// says so; one that lists jobs shows every principal's.
func TestDevicePageSaysWhyItHasNoJobs(t *testing.T) {
	f := newFixture(t, false)
	code, _ := f.state.CreateEnrollCode("", time.Hour, time.Now())
	dev, _, _, err := f.state.Enroll(code, "box", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := f.signIn("alice")
	f.devices.fn = func(string, json.RawMessage) (json.RawMessage, error) {
		return nil, errcode.New(errcode.AdminRefused, "this device does not allow admin views")
	}
	if _, page := f.do(c, "GET", Prefix+"devices/"+dev.ID, nil, nil); !strings.Contains(page, "does not allow admin views") {
		t.Errorf("an admin-refusing device's page:\n%s", page)
	}
	f.devices.fn = func(tool string, _ json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"jobs":[{"process_id":"1111aaaa-0000-4000-8000-000000000001","owner":"alice-bot","state":"running","created_at":"2026-12-03T00:00:00Z"},
			{"process_id":"2222bbbb-0000-4000-8000-000000000002","owner":"bob-bot","state":"exited","terminal":true,"created_at":"2026-12-03T00:00:00Z","exit_code":0}]}`), nil
	}
	_, page := f.do(c, "GET", Prefix+"devices/"+dev.Name, nil, nil)
	for _, want := range []string{"alice-bot", "bob-bot", "running", "exited"} {
		if !strings.Contains(page, want) {
			t.Errorf("the device page lacks %q", want)
		}
	}
	f.devices.mu.Lock()
	last := f.devices.calls[len(f.devices.calls)-1]
	f.devices.mu.Unlock()
	if last != "alice "+dev.ID+" process.jobs" {
		t.Errorf("the page called %q", last)
	}
	if resp, _ := f.do(c, "GET", Prefix+"devices/nope", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown device: %d", resp.StatusCode)
	}
}

// job1 is a job's ID, as a device gives it.
const job1 = "0f8fad5b-d9cb-469f-a165-70867728950e"

func enrolled(t *testing.T, f *fixture, name string) *store.Device {
	t.Helper()
	code, _ := f.state.CreateEnrollCode("", time.Hour, time.Now())
	dev, _, _, err := f.state.Enroll(code, name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// TestJobTailStreamsUntilTheEnd: the tail sends the output the job page
// shows, polls with the client's long poll from where the last page
// ended, and ends with the job's final state.
func TestJobTailStreamsUntilTheEnd(t *testing.T) {
	f := newFixture(t, false)
	dev := enrolled(t, f, "box")
	c := f.signIn("alice")
	var polls []string
	f.devices.fn = func(tool string, args json.RawMessage) (json.RawMessage, error) {
		if tool == "process.status" {
			return json.RawMessage(`{"process_id":"` + job1 + `","state":"exited","terminal":true,"exit_code":3,
				"started_at":"2026-12-03T10:00:00Z","completed_at":"2026-12-03T10:01:20.044Z"}`), nil
		}
		polls = append(polls, string(args))
		switch len(polls) {
		case 1:
			return json.RawMessage(`{"state":"running","stdout":{"data":"one\n","encoding":"utf-8","offset":0,"next_offset":4},"stderr":{"data":"","encoding":"utf-8","offset":0,"next_offset":0}}`), nil
		case 2:
			return json.RawMessage(`{"state":"running","stdout":{"data":"twö\n","encoding":"utf-8","offset":4,"next_offset":10},"stderr":{"data":"ZXJy","encoding":"base64","offset":0,"next_offset":3}}`), nil
		}
		return json.RawMessage(`{"state":"exited","terminal":true,"stdout":{"data":"","encoding":"utf-8","offset":10,"next_offset":10,"eof":true},"stderr":{"data":"","encoding":"utf-8","offset":3,"next_offset":3,"eof":true}}`), nil
	}
	resp, body := f.do(c, "GET", Prefix+"devices/"+dev.ID+"/jobs/"+job1+"/tail", nil, nil)
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("tail content type %q", resp.Header.Get("Content-Type"))
	}
	// The first page is what the job printed before the page opened, so
	// marked; what follows is not.
	for _, want := range []string{"retry: 2000", `event: output` + "\n" + `data: {"stream":"stdout","data":"one\n","encoding":"utf-8","history":true}` + "\n",
		`{"stream":"stdout","data":"twö\n","encoding":"utf-8"}` + "\n", `{"stream":"stderr","data":"ZXJy","encoding":"base64"}` + "\n",
		`event: state` + "\n" + `data: {"state":"running","tone":"live"}`,
		`event: end` + "\n" + `data: {"state":"exited","tone":"bad","ended":"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the tail lacks %q:\n%s", want, body)
		}
	}
	// The end says how the job ended, read once it did: the page shows it
	// without a reload.
	if !strings.Contains(body, `"ended_abs":"2026-12-03 10:01:20Z","how":"exit 3","took":"1m20s"}`) || strings.Contains(body, "event: refused") {
		t.Errorf("the tail's end does not say how the job ended:\n%s", body)
	}
	if len(polls) != 3 || !strings.Contains(polls[1], `"stdout_offset":4`) || !strings.Contains(polls[1], `"wait_ms":25000`) ||
		!strings.Contains(polls[2], `"stdout_offset":10`) || !strings.Contains(polls[2], `"stderr_offset":3`) {
		t.Errorf("polls: %q", polls)
	}
	// A device whose record is of another job is not believed: the end
	// says only the state the output gave.
	f.devices.fn = func(tool string, args json.RawMessage) (json.RawMessage, error) {
		if tool == "process.status" {
			return json.RawMessage(`{"process_id":"5fa7e0b2-8c1d-4e3f-9a6b-0d2c4e6f8a1b","state":"exited","exit_code":3,"completed_at":"2026-12-03T10:01:20Z"}`), nil
		}
		return json.RawMessage(`{"state":"exited","terminal":true,"stdout":{"eof":true},"stderr":{"eof":true}}`), nil
	}
	_, body = f.do(c, "GET", Prefix+"devices/"+dev.ID+"/jobs/"+job1+"/tail", nil, nil)
	if !strings.Contains(body, "event: end\n"+`data: {"state":"exited","tone":"ok","ended":"—","ended_abs":"","how":"—","took":"—"}`) {
		t.Errorf("the end of a tail whose device answered for another job:\n%s", body)
	}
	f.devices.fn = nil
	_, body = f.do(c, "GET", Prefix+"devices/"+dev.ID+"/jobs/"+job1+"/tail", nil, nil)
	if !strings.Contains(body, "event: refused") || !strings.Contains(body, "not connected") {
		t.Errorf("an offline device's tail:\n%s", body)
	}
}

// TestJobPageStopAndRevoke: the job page shows a running job with Stop;
// Stop calls process.stop as the admin and comes back to the job; a
// device revoked in the panel is revoked in the state.
func TestJobPageStopAndRevoke(t *testing.T) {
	f := newFixture(t, false)
	dev := enrolled(t, f, "box")
	c := f.signIn("alice")
	f.devices.fn = func(tool string, _ json.RawMessage) (json.RawMessage, error) {
		if tool == "process.stop" {
			return json.RawMessage(`{}`), nil
		}
		return json.RawMessage(`{"process_id":"` + job1 + `","owner":"bob","state":"running","created_at":"2026-12-03T00:00:00Z"}`), nil
	}
	_, page := f.do(c, "GET", Prefix+"devices/"+dev.ID+"/jobs/"+job1, nil, nil)
	for _, want := range []string{`id="stop"`, "bob", "running", `data-tail="/panel/devices/` + dev.ID + `/jobs/` + job1 + `/tail"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the job page lacks %q", want)
		}
	}
	resp, _ := f.do(c, "POST", Prefix+"devices/"+dev.ID+"/jobs/"+job1+"/stop", url.Values{"csrf": {f.csrf(c)}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != Prefix+"devices/"+dev.ID+"/jobs/"+job1 {
		t.Fatalf("stop: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	f.devices.mu.Lock()
	last := f.devices.calls[len(f.devices.calls)-1]
	f.devices.mu.Unlock()
	if last != "alice "+dev.ID+" process.stop" {
		t.Errorf("Stop called %q", last)
	}
	f.devices.fn = func(string, json.RawMessage) (json.RawMessage, error) {
		return nil, errcode.New(errcode.NotRunning, "ended")
	}
	if resp, _ := f.do(c, "POST", Prefix+"devices/"+dev.ID+"/jobs/"+job1+"/stop", url.Values{"csrf": {f.csrf(c)}}, nil); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("a refused stop: %d", resp.StatusCode)
	}
	if resp, _ := f.do(c, "POST", Prefix+"devices/"+dev.ID+"/revoke", url.Values{"csrf": {f.csrf(c)}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	if d, _ := f.state.FindDevice(dev.ID); d.Standing != store.StandingRevoked {
		t.Errorf("after Revoke the device is %s", d.Standing)
	}
	if resp, _ := f.do(c, "POST", Prefix+"devices/nope/revoke", url.Values{"csrf": {f.csrf(c)}}, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("revoking an unknown device: %d", resp.StatusCode)
	}
}

// TestOverviewCountsAndLiveDevices: the overview counts connected of
// enrolled devices and the last hour's calls; the device stream sends the
// devices' links and then only changes.
func TestOverviewCountsAndLiveDevices(t *testing.T) {
	f := newFixture(t, false)
	enrolled(t, f, "a")
	enrolled(t, f, "b")
	now := time.Now()
	f.state.AppendAudit([]store.AuditEntry{
		{At: now, Principal: "x", Tool: "process.jobs", Outcome: store.AuditOK},
		{At: now, Principal: "x", Tool: "process.jobs", Outcome: store.AuditFailed, Code: "not_found"},
		{At: now.Add(-2 * time.Hour), Principal: "x", Tool: "process.jobs", Outcome: store.AuditOK},
	}, now)
	c := f.signIn("alice")
	_, page := f.do(c, "GET", Prefix, nil, nil)
	for _, want := range []string{`<strong id="connected-count">0</strong> connected of <strong>2</strong>`,
		"Calls in the last hour: <strong>2</strong>, of which failed: <strong>1</strong>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the overview lacks %q:\n%s", want, page)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+Prefix+"events/devices", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if n := strings.Count(string(b), "event: devices"); n != 1 || !strings.Contains(string(b), `"connected":false`) {
		t.Errorf("an unchanging device list was sent %d times in 3 s:\n%s", n, b)
	}
}

// TestOutdatedAgentHasUpdate: the Device page of a linked device whose
// agent the relay calls outdated shows the badge and Update; Update (a
// POST with the CSRF token) asks the relay to update it, comes back to
// the device, and is audited; a device the relay cannot reach says so.
func TestOutdatedAgentHasUpdate(t *testing.T) {
	f := newFixture(t, false)
	dev := enrolled(t, f, "box")
	c := f.signIn("alice")
	_, page := f.do(c, "GET", Prefix+"devices/"+dev.ID, nil, nil)
	if strings.Contains(page, `id="agent-outdated"`) || strings.Contains(page, `id="agent-update"`) {
		t.Fatal("a device without an offer is called outdated")
	}
	if err := f.state.JoinReplica(store.Replica{ID: "r1", Name: "r1", Address: "http://127.0.0.1:1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.state.TakeLink(dev.ID, "r1", "", time.Now()); err != nil || !ok {
		t.Fatalf("TakeLink: %v %v", ok, err)
	}
	f.state.NoteAgent(dev.ID, "r1", store.AgentNote{Version: "1.0.0", Offered: "1.1.0"})
	_, page = f.do(c, "GET", Prefix+"devices/"+dev.ID, nil, nil)
	for _, want := range []string{`id="agent-outdated"`, `id="agent-update"`, "1.1.0", `action="/panel/devices/` + dev.ID + `/update"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the Device page lacks %q", want)
		}
	}
	if resp, _ := f.do(c, "POST", Prefix+"devices/"+dev.ID+"/update", url.Values{}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("Update without the CSRF token: %d", resp.StatusCode)
	}
	for _, c2 := range []struct {
		err    error
		status int
		says   string
	}{
		{nil, http.StatusConflict, "is not linked now"},
		{errcode.New(errcode.InvalidArgument, "current"), http.StatusConflict, "runs the version this relay serves"},
		{errcode.New(errcode.Unavailable, "gone"), http.StatusServiceUnavailable, "could not be reached"},
	} {
		f.devices.mu.Lock()
		f.devices.updateErr = c2.err
		f.devices.mu.Unlock()
		if resp, page := f.do(c, "POST", Prefix+"devices/"+dev.ID+"/update", url.Values{"csrf": {f.csrf(c)}}, nil); resp.StatusCode != c2.status || !strings.Contains(page, c2.says) {
			t.Errorf("Update answered %v: %d, want %d saying %q", c2.err, resp.StatusCode, c2.status, c2.says)
		}
	}
	f.devices.mu.Lock()
	f.devices.updateErr = nil
	f.devices.mu.Unlock()
	f.devices.fn = func(string, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"jobs":[]}`), nil }
	resp, _ := f.do(c, "POST", Prefix+"devices/"+dev.ID+"/update", url.Values{"csrf": {f.csrf(c)}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != Prefix+"devices/"+dev.ID {
		t.Fatalf("Update: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	f.devices.mu.Lock()
	calls := strings.Join(f.devices.calls, "|")
	f.devices.mu.Unlock()
	if !strings.Contains(calls, "update "+dev.ID) {
		t.Errorf("Update did not ask the relay: %s", calls)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var got []string
	for _, e := range f.audited {
		if e.Tool == "panel.agent_update" {
			got = append(got, e.Principal+" "+e.Device+" "+e.Outcome+" "+e.Code)
		}
	}
	if want := []string{"admin:alice " + dev.ID + " failed device_offline", "admin:alice " + dev.ID + " failed invalid_argument",
		"admin:alice " + dev.ID + " failed unavailable", "admin:alice " + dev.ID + " ok "}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("audited %q, want %q", got, want)
	}
}

// TestDevicePageSaysHowJobsAreKeptFromTheAgent: the Device page shows what
// the linked agent said of its binary and the user manager, each word in
// plain terms with a badge that marks what a job could do to the agent;
// before the agent says anything, a dash.
func TestDevicePageSaysHowJobsAreKeptFromTheAgent(t *testing.T) {
	f := newFixture(t, false)
	dev := enrolled(t, f, "box")
	c := f.signIn("alice")
	if err := f.state.JoinReplica(store.Replica{ID: "r1", Name: "r1", Address: "http://127.0.0.1:1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.state.TakeLink(dev.ID, "r1", "", time.Now()); err != nil || !ok {
		t.Fatalf("TakeLink: %v %v", ok, err)
	}
	field := func(page, id string) string {
		t.Helper()
		i := strings.Index(page, `<dd id="`+id+`">`)
		if i < 0 {
			t.Fatalf("the Device page has no %s:\n%s", id, page)
		}
		rest := page[i:]
		return rest[:strings.Index(rest, "</dd>")]
	}
	_, page := f.do(c, "GET", Prefix+"devices/"+dev.ID, nil, nil)
	for _, id := range []string{"agent-binary", "user-manager"} {
		if got := field(page, id); !strings.HasSuffix(got, "—") {
			t.Errorf("%s before the agent said anything: %q", id, got)
		}
	}
	for _, c2 := range []struct {
		binary, manager string
		wantBinary      []string
		wantManager     []string
	}{
		{isolation.BinaryReadOnly, isolation.ManagerCutOff,
			[]string{`badge ok">read-only to jobs`, "no job or command can replace the agent"},
			[]string{`badge ok">cut off`, "unit files read-only"}},
		{isolation.BinaryReadOnlyInUnits, isolation.ManagerCutPartly,
			[]string{`badge bad">writable by commands`, "a command can replace the agent"},
			[]string{`badge bad">cut off in part`, "refuses the others"}},
		{isolation.BinaryWritable, isolation.ManagerCutRefused,
			[]string{`badge bad">writable by jobs`, "a job can replace the agent"},
			[]string{`badge bad">cut refused`, "refuses every job and command"}},
		{isolation.BinaryShared, isolation.ManagerReachable,
			[]string{`badge bad">writable by jobs`, "a directory of its own"},
			[]string{"can start units of their own"}},
		{isolation.BinaryNotWritable, "",
			[]string{"cannot write"}, []string{"—"}},
	} {
		note := store.AgentNote{Version: "1.0.0", Isolation: isolation.Report{AgentBinary: c2.binary, UserManager: c2.manager}}
		if err := f.state.NoteAgent(dev.ID, "r1", note); err != nil {
			t.Fatal(err)
		}
		_, page := f.do(c, "GET", Prefix+"devices/"+dev.ID, nil, nil)
		for id, wants := range map[string][]string{"agent-binary": c2.wantBinary, "user-manager": c2.wantManager} {
			got := field(page, id)
			for _, want := range wants {
				if !strings.Contains(got, want) {
					t.Errorf("%s %q/%q: %q lacks %q", id, c2.binary, c2.manager, got, want)
				}
			}
			if strings.Contains(got, "badge ok") && strings.Contains(got, "badge bad") {
				t.Errorf("%s %q/%q: both badges: %q", id, c2.binary, c2.manager, got)
			}
		}
	}
}
