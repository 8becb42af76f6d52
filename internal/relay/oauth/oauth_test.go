package oauth

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/pgtest"
	"github.com/commandcore/commandcore/internal/relay/store"
)

const (
	public   = "https://relay.example"
	panelURL = "https://relay.example/panel/"
	resource = public + "/mcp/dev1"
	verifier = "dBjftJeZ4CVP-mJ92K9qxabcdefghijklmnopqrstuvwxyz0123"
	loopback = "http://127.0.0.1:33418/callback"
)

var challenge = func() string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}()

// fixture is the authorization server over a real state, served on
// loopback, with the audit rows it queued.
type fixture struct {
	st  store.State
	srv *Server
	hs  *httptest.Server

	mu     sync.Mutex
	audits []store.AuditEntry
}

func newFixture(t *testing.T, st store.State) *fixture {
	t.Helper()
	if st == nil {
		s, err := store.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		st = s
	}
	f := &fixture{st: st}
	srv, err := New(Config{State: st, PublicURL: public + "/", PanelURL: panelURL, Audit: func(e store.AuditEntry) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.audits = append(f.audits, e)
	}})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	f.hs = httptest.NewServer(srv.Handler())
	t.Cleanup(f.hs.Close)
	return f
}

// noFollow is a client that shows redirects rather than following them.
var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (f *fixture) auditRows() []store.AuditEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]store.AuditEntry(nil), f.audits...)
}

// register registers a client with these redirect URIs and returns its ID.
func (f *fixture) register(t *testing.T, redirects ...string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"redirect_uris": redirects, "client_name": "Test client", "token_endpoint_auth_method": "none",
		"grant_types": []string{"authorization_code", "refresh_token"}, "jwks": map[string]any{"keys": []any{}}})
	resp, err := http.Post(f.hs.URL+RegisterPath, "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out oauthex.ClientRegistrationResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated || out.ClientID == "" {
		t.Fatalf("register: %d %+v %v", resp.StatusCode, out, err)
	}
	if out.TokenEndpointAuthMethod != "none" || out.ClientSecret != "" || out.ClientName != "Test client" {
		t.Fatalf("registration: %+v", out)
	}
	return out.ClientID
}

// authParams is a good authorization request.
func authParams(clientID, redirect string) url.Values {
	return url.Values{"client_id": {clientID}, "redirect_uri": {redirect}, "response_type": {"code"}, "state": {"st-1"},
		"code_challenge": {challenge}, "code_challenge_method": {"S256"}, "resource": {resource}, "scope": {"read"}}
}

func (f *fixture) authorize(t *testing.T, q url.Values) *http.Response {
	t.Helper()
	resp, err := noFollow.Get(f.hs.URL + AuthorizePath + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// consent follows a good authorization request to its consent page's
// request ID.
func (f *fixture) consent(t *testing.T, q url.Values) string {
	t.Helper()
	resp := f.authorize(t, q)
	loc := resp.Header.Get("Location")
	id, ok := strings.CutPrefix(loc, panelURL+"consent/")
	if resp.StatusCode != http.StatusFound || !ok {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("authorize: %d %q %s", resp.StatusCode, loc, body)
	}
	return id
}

var spec = store.ConnectionSpec{Devices: []string{"dev1"}, Tools: []string{"process.jobs"}, Principal: "alice", TTL: 24 * time.Hour, Admin: "olga"}

// code runs a good authorization request through consent and returns its
// code.
func (f *fixture) code(t *testing.T, clientID, redirect string) string {
	t.Helper()
	id := f.consent(t, authParams(clientID, redirect))
	code, req, err := f.st.ApproveAuthRequest(id, spec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if req.State != "st-1" || req.Resource != resource || req.Scope != "read" || req.ClientName != "Test client" {
		t.Fatalf("request kept: %+v", req)
	}
	return code
}

// post posts a form and returns the status and the decoded JSON body.
func (f *fixture) post(t *testing.T, path string, form url.Values) (int, map[string]any) {
	t.Helper()
	resp, err := http.PostForm(f.hs.URL+path, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if path == TokenPath && resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("token response without Cache-Control: no-store")
	}
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func codeForm(clientID, code, redirect string) url.Values {
	return url.Values{"grant_type": {"authorization_code"}, "client_id": {clientID}, "code": {code}, "redirect_uri": {redirect},
		"code_verifier": {verifier}, "resource": {resource}}
}

func wantError(t *testing.T, what string, status int, body map[string]any, wantStatus int, code string) {
	t.Helper()
	if status != wantStatus || body["error"] != code {
		t.Errorf("%s: %d %v, want %d %s", what, status, body, wantStatus, code)
	}
}

func TestServerMetadata(t *testing.T) {
	f := newFixture(t, nil)
	resp, err := http.Get(f.hs.URL + ServerMetadataPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m oauthex.AuthServerMeta
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m.Issuer != public || m.AuthorizationEndpoint != public+"/authorize" || m.TokenEndpoint != public+"/token" ||
		m.RegistrationEndpoint != public+"/register" || m.RevocationEndpoint != public+"/revoke" {
		t.Errorf("endpoints: %+v", m)
	}
	if strings.Join(m.CodeChallengeMethodsSupported, ",") != "S256" || strings.Join(m.GrantTypesSupported, ",") != "authorization_code,refresh_token" ||
		!m.ClientIDMetadataDocumentSupported || !m.AuthorizationResponseIssParameterSupported || strings.Join(m.ScopesSupported, ",") != "read,run,write,all,offline_access" ||
		strings.Join(m.TokenEndpointAuthMethodsSupported, ",") != "none" {
		t.Errorf("metadata: %+v", m)
	}
}

func TestResourceMetadata(t *testing.T) {
	f := newFixture(t, nil)
	for path, want := range map[string]string{
		ResourceMetadataPath:                public + "/mcp",
		ResourceMetadataPath + "/mcp":       public + "/mcp",
		ResourceMetadataPath + "/mcp/dev1":  public + "/mcp/dev1",
		ResourceMetadataPath + "/mcp/":      public + "/mcp/",
		ResourceMetadataPath + "/mcp/dev1/": public + "/mcp/dev1/",
	} {
		resp, err := http.Get(f.hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var m oauthex.ProtectedResourceMetadata
		err = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if err != nil || m.Resource != want || len(m.AuthorizationServers) != 1 || m.AuthorizationServers[0] != public {
			t.Errorf("%s: %+v %v", path, m, err)
		}
	}
	for _, bad := range []string{"/mcp/dev1/x/", "/mcp/a%20b/"} {
		resp, err := http.Get(f.hs.URL + ResourceMetadataPath + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", bad, resp.StatusCode)
		}
	}
	const scope = `, scope="read run write all offline_access"`
	for _, tc := range []struct {
		device     string
		slash      bool
		code, want string
	}{
		{"dev1", false, "", `Bearer resource_metadata="` + public + `/.well-known/oauth-protected-resource/mcp/dev1"` + scope},
		{"", false, "invalid_token", `Bearer error="invalid_token", resource_metadata="` + public + `/.well-known/oauth-protected-resource/mcp"` + scope},
		{"dev1", true, "", `Bearer resource_metadata="` + public + `/.well-known/oauth-protected-resource/mcp/dev1/"` + scope},
		{"", true, "", `Bearer resource_metadata="` + public + `/.well-known/oauth-protected-resource/mcp/"` + scope},
	} {
		if got := f.srv.Challenge(tc.device, tc.slash, tc.code); got != tc.want {
			t.Errorf("challenge %+v: %s", tc, got)
		}
	}
}

func TestRegisterRefusals(t *testing.T) {
	f := newFixture(t, nil)
	for body, code := range map[string]string{
		`{"redirect_uris":[]}`:                              ErrInvalidRedirectURI,
		`{"redirect_uris":["javascript:alert(1)"]}`:         ErrInvalidRedirectURI,
		`{"redirect_uris":["http://example.com/cb"]}`:       ErrInvalidRedirectURI,
		`{"redirect_uris":["https://example.com/cb#frag"]}`: ErrInvalidRedirectURI,
		`{"redirect_uris":"https://a.example/cb"}`:          ErrInvalidClientMetadata,
		`not json`: ErrInvalidClientMetadata,
		`{"redirect_uris":["https://a.example/cb"],"client_name":"` + strings.Repeat("x", limits.OAuthMaxFormBytes) + `"}`: ErrInvalidClientMetadata,
	} {
		resp, err := http.Post(f.hs.URL+RegisterPath, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		wantError(t, body[:min(len(body), 60)], resp.StatusCode, m, http.StatusBadRequest, code)
	}
	many := make([]string, limits.OAuthMaxRedirectURIs+1)
	for i := range many {
		many[i] = "https://a.example/cb"
	}
	if _, err := DecodeRegistration([]byte(`{"redirect_uris":["` + strings.Join(many, `","`) + `"]}`)); err == nil || err.code != ErrInvalidRedirectURI {
		t.Errorf("17 redirect URIs: %v", err)
	}
	// What claude.ai sends: a public client is registered all the same,
	// and told so.
	resp, err := http.Post(f.hs.URL+RegisterPath, "application/json", strings.NewReader(
		`{"redirect_uris":["https://claude.ai/api/mcp/auth_callback"],"token_endpoint_auth_method":"client_secret_post","grant_types":["authorization_code","refresh_token"],"response_types":["code"],"client_name":"Claude"}`))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || out["token_endpoint_auth_method"] != "none" || out["client_secret"] != nil {
		t.Errorf("claude.ai's registration: %d %v", resp.StatusCode, out)
	}
	c, rerr := DecodeRegistration([]byte(`{"redirect_uris":["com.example.app:/cb","http://[::1]/cb"],"client_name":"bad\u202ename"}`))
	if rerr != nil || c.Name != "" || len(c.RedirectURIs) != 2 {
		t.Errorf("native redirects, hidden name dropped: %+v %v", c, rerr)
	}
}

func TestAuthorizeErrorPagesNeverRedirect(t *testing.T) {
	f := newFixture(t, nil)
	id := f.register(t, "https://client.example/cb", loopback)
	for name, q := range map[string]url.Values{
		"unknown client":       authParams("ccc_00000000000000000000000000000000", "https://client.example/cb"),
		"no client":            authParams("", "https://client.example/cb"),
		"client not a URL":     authParams("my-client", "https://client.example/cb"),
		"wrong redirect":       authParams(id, "https://evil.example/cb"),
		"redirect's path":      authParams(id, "https://client.example/cb2"),
		"loopback other path":  authParams(id, "http://127.0.0.1:9/other"),
		"loopback other host":  authParams(id, "http://localhost:33418/callback"),
		"no redirect":          authParams(id, ""),
		"CIMD on loopback":     authParams("https://127.0.0.1:1/client.json", "https://client.example/cb"),
		"CIMD not HTTPS":       authParams("http://client.example/client.json", "https://client.example/cb"),
		"redirect with a dash": authParams(id, "https://client.example/cb#x"),
	} {
		resp := f.authorize(t, q)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" || !strings.Contains(string(body), "Cannot connect this client") {
			t.Errorf("%s: %d %q", name, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	two := authParams(id, "https://client.example/cb")
	two.Add("redirect_uri", "https://evil.example/cb")
	if resp := f.authorize(t, two); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
		t.Errorf("two redirect URIs: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestAuthorizeErrorsGoBackToTheClient(t *testing.T) {
	f := newFixture(t, nil)
	id := f.register(t, "https://client.example/cb?x=1")
	redirect := "https://client.example/cb?x=1"
	for name, tc := range map[string]struct {
		change func(url.Values)
		code   string
	}{
		"PKCE plain":      {func(q url.Values) { q.Set("code_challenge_method", "plain") }, ErrInvalidRequest},
		"PKCE missing":    {func(q url.Values) { q.Del("code_challenge"); q.Del("code_challenge_method") }, ErrInvalidRequest},
		"method missing":  {func(q url.Values) { q.Del("code_challenge_method") }, ErrInvalidRequest},
		"challenge short": {func(q url.Values) { q.Set("code_challenge", "abc") }, ErrInvalidRequest},
		"response type":   {func(q url.Values) { q.Set("response_type", "token") }, ErrUnsupportedResponseType},
		"no resource":     {func(q url.Values) { q.Del("resource") }, ErrInvalidRequest},
		"other resource":  {func(q url.Values) { q.Set("resource", "https://other.example/mcp") }, ErrInvalidTarget},
		"resource path":   {func(q url.Values) { q.Set("resource", public+"/mcp/a/b") }, ErrInvalidTarget},
		"repeated param":  {func(q url.Values) { q.Add("scope", "all") }, ErrInvalidRequest},
		"state not text":  {func(q url.Values) { q.Set("state", "a\x00b") }, ErrInvalidRequest},
	} {
		q := authParams(id, redirect)
		tc.change(q)
		resp := f.authorize(t, q)
		loc, err := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusFound || err != nil || !strings.HasPrefix(loc.String(), "https://client.example/cb?") {
			t.Errorf("%s: %d %q", name, resp.StatusCode, resp.Header.Get("Location"))
			continue
		}
		got := loc.Query()
		wantState := "st-1"
		if name == "state not text" {
			wantState = ""
		}
		if got.Get("error") != tc.code || got.Get("iss") != public || got.Get("state") != wantState || got.Get("x") != "1" || got.Get("code") != "" {
			t.Errorf("%s: %v", name, got)
		}
	}
}

func TestAuthorizeLoopbackPortMayChange(t *testing.T) {
	f := newFixture(t, nil)
	id := f.register(t, loopback)
	f.consent(t, authParams(id, "http://127.0.0.1:50999/callback"))
	// Scopes the relay does not offer are dropped; known ones kept.
	q := authParams(id, loopback)
	q.Set("scope", "run offline_access")
	reqID := f.consent(t, q)
	req, err := f.st.AuthRequest(reqID, time.Now())
	if err != nil || req.Scope != "run" || req.Challenge != challenge {
		t.Fatalf("request: %+v %v", req, err)
	}
}

func TestTokenFlow(t *testing.T) {
	f := newFixture(t, nil)
	flow(t, f)
}

// TestTokenFlowOnPostgres runs the sign-in's steps on PostgreSQL: any
// replica serves any step, so the state is where they meet.
func TestTokenFlowOnPostgres(t *testing.T) {
	c := pgtest.StartT(t)
	u, err := c.CreateDatabase("oauth")
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenPostgres(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	flow(t, newFixture(t, st))
}

// flow is a client's life: a code for tokens, the code once only, a
// refresh that rotates, a replayed refresh token that ends the
// connection, and revocation.
func flow(t *testing.T, f *fixture) {
	id := f.register(t, loopback)
	code := f.code(t, id, loopback)
	status, body := f.post(t, TokenPath, codeForm(id, code, loopback))
	access, _ := body["access_token"].(string)
	refresh, _ := body["refresh_token"].(string)
	if status != http.StatusOK || body["token_type"] != "Bearer" || body["expires_in"] != 3600.0 || body["scope"] != "" && body["scope"] != nil ||
		!strings.HasPrefix(access, "cca_") || !strings.HasPrefix(refresh, "ccr_") {
		t.Fatalf("token: %d %v", status, body)
	}
	tok, err := f.st.AuthToken(access, time.Now())
	if err != nil || tok.Resource != resource || tok.Principal != "alice" || tok.Kind != store.TokenOAuth || tok.Tools[0] != "process.jobs" {
		t.Fatalf("access token: %+v %v", tok, err)
	}
	// The code again: refused, and the connection it made is revoked.
	status, body = f.post(t, TokenPath, codeForm(id, code, loopback))
	wantError(t, "code reused", status, body, http.StatusBadRequest, ErrInvalidGrant)
	if _, err := f.st.AuthToken(access, time.Now()); err == nil {
		t.Fatal("a reused code left its connection working")
	}
	rows := f.auditRows()
	if len(rows) != 2 || rows[0].Tool != AuditToken || rows[0].Outcome != store.AuditOK || rows[0].TokenID != tok.ID || rows[0].Principal != "alice" ||
		rows[1].Tool != AuditToken || rows[1].Code != AuditReused || rows[1].TokenID != tok.ID || rows[1].Principal != "alice" {
		t.Fatalf("audit: %+v", rows)
	}

	// A new connection; its refresh token rotates.
	code = f.code(t, id, loopback)
	_, body = f.post(t, TokenPath, codeForm(id, code, loopback))
	refresh = body["refresh_token"].(string)
	rf := url.Values{"grant_type": {"refresh_token"}, "client_id": {id}, "refresh_token": {refresh}}
	status, body = f.post(t, TokenPath, rf)
	access2, _ := body["access_token"].(string)
	if status != http.StatusOK || body["refresh_token"] == refresh || access2 == "" {
		t.Fatalf("refresh: %d %v", status, body)
	}
	tok2, err := f.st.AuthToken(access2, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Replayed at once (a retry after a lost answer): accepted once more,
	// within its grace.
	if status, body = f.post(t, TokenPath, rf); status != http.StatusOK || body["access_token"] == nil {
		t.Fatalf("refresh replayed within its grace: %d %v", status, body)
	}
	// Replayed again: refused, the connection ends, the relay audits it.
	status, body = f.post(t, TokenPath, rf)
	wantError(t, "refresh reused", status, body, http.StatusBadRequest, ErrInvalidGrant)
	if _, err := f.st.AuthToken(access2, time.Now()); err == nil {
		t.Fatal("a replayed refresh token left its connection working")
	}
	rows = f.auditRows()
	last := rows[len(rows)-1]
	if rows[len(rows)-2].Tool != AuditRefresh || rows[len(rows)-2].Outcome != store.AuditOK ||
		last.Tool != AuditRefresh || last.Code != AuditReused || last.TokenID != tok2.ID || last.Principal != "alice" {
		t.Fatalf("audit: %+v", rows)
	}

	// Revocation (RFC 7009) ends a connection by either token; a token
	// that is none is no error.
	code = f.code(t, id, loopback)
	_, body = f.post(t, TokenPath, codeForm(id, code, loopback))
	access3, refresh3 := body["access_token"].(string), body["refresh_token"].(string)
	if status, _ := f.post(t, RevokePath, url.Values{"token": {refresh3}, "client_id": {id}}); status != http.StatusOK {
		t.Fatalf("revoke: %d", status)
	}
	if _, err := f.st.AuthToken(access3, time.Now()); err == nil {
		t.Fatal("revoking the refresh token left the access token working")
	}
	if status, _ := f.post(t, RevokePath, url.Values{"token": {"ccr_nothing"}}); status != http.StatusOK {
		t.Fatalf("revoke of nothing: %d", status)
	}
	rows = f.auditRows()
	// The row names the connection and whose it was.
	if last := rows[len(rows)-1]; last.Tool != AuditRevoke || last.Outcome != store.AuditOK || last.Principal != "alice" || !strings.HasPrefix(last.TokenID, "tok_") {
		t.Fatalf("audit: %+v", rows)
	}
	for _, e := range rows {
		if err := f.st.AppendAudit([]store.AuditEntry{e}, e.At); err != nil {
			t.Fatalf("audit row %+v refused: %v", e, err)
		}
	}
}

func TestTokenRefusals(t *testing.T) {
	f := newFixture(t, nil)
	id := f.register(t, loopback)
	other := f.register(t, loopback)
	for name, tc := range map[string]struct {
		change func(url.Values)
		status int
		code   string
	}{
		"wrong verifier":   {func(v url.Values) { v.Set("code_verifier", strings.Repeat("a", 43)) }, 400, ErrInvalidGrant},
		"no verifier":      {func(v url.Values) { v.Del("code_verifier") }, 400, ErrInvalidRequest},
		"wrong redirect":   {func(v url.Values) { v.Set("redirect_uri", "http://127.0.0.1:1/callback") }, 400, ErrInvalidGrant},
		"other client":     {func(v url.Values) { v.Set("client_id", other) }, 400, ErrInvalidGrant},
		"other resource":   {func(v url.Values) { v.Set("resource", public+"/mcp/dev2") }, 400, ErrInvalidTarget},
		"foreign resource": {func(v url.Values) { v.Set("resource", "https://x.example/mcp") }, 400, ErrInvalidTarget},
		"no client":        {func(v url.Values) { v.Del("client_id") }, 401, ErrInvalidClient},
		"a secret":         {func(v url.Values) { v.Set("client_secret", "s") }, 401, ErrInvalidClient},
		"unknown grant":    {func(v url.Values) { v.Set("grant_type", "password") }, 400, ErrUnsupportedGrantType},
		"no grant":         {func(v url.Values) { v.Del("grant_type") }, 400, ErrInvalidRequest},
		"bad code":         {func(v url.Values) { v.Set("code", "cac_nothing") }, 400, ErrInvalidGrant},
	} {
		form := codeForm(id, f.code(t, id, loopback), loopback)
		tc.change(form)
		status, body := f.post(t, TokenPath, form)
		wantError(t, name, status, body, tc.status, tc.code)
	}
	// Each of those codes is spent, whatever refused it.
	form := codeForm(id, f.code(t, id, loopback), loopback)
	form.Set("code_verifier", strings.Repeat("b", 43))
	f.post(t, TokenPath, form)
	form.Set("code_verifier", verifier)
	status, body := f.post(t, TokenPath, form)
	wantError(t, "a refused code again", status, body, 400, ErrInvalidGrant)

	// Bodies: a form, each parameter once, bounded.
	resp, err := http.Post(f.hs.URL+TokenPath, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("JSON body: %d", resp.StatusCode)
	}
	status, body = f.post(t, TokenPath, url.Values{"grant_type": {"refresh_token", "refresh_token"}, "client_id": {id}})
	wantError(t, "repeated parameter", status, body, 400, ErrInvalidRequest)
	status, body = f.post(t, TokenPath, url.Values{"grant_type": {"refresh_token"}, "client_id": {id}, "pad": {strings.Repeat("x", limits.OAuthMaxFormBytes)}})
	wantError(t, "large body", status, body, 400, ErrInvalidRequest)
	status, body = f.post(t, TokenPath, url.Values{"grant_type": {"refresh_token"}, "client_id": {id}, "refresh_token": {"ccr_x"}})
	wantError(t, "bad refresh token", status, body, 400, ErrInvalidGrant)
	status, body = f.post(t, RevokePath, url.Values{"client_id": {id}})
	wantError(t, "revoke without token", status, body, 400, ErrInvalidRequest)
	status, body = f.post(t, RevokePath, url.Values{"token": {"x"}, "client_secret": {"s"}})
	wantError(t, "revoke with a secret", status, body, 401, ErrInvalidClient)
}

func TestResponseURL(t *testing.T) {
	if got := Approved("https://c.example/cb?a=1", public, "s t", "cac_x"); got != "https://c.example/cb?a=1&code=cac_x&iss=https%3A%2F%2Frelay.example&state=s+t" {
		t.Errorf("approved: %s", got)
	}
	if got := Denied("http://127.0.0.1:5/cb", public, ""); got != "http://127.0.0.1:5/cb?error=access_denied&iss=https%3A%2F%2Frelay.example" {
		t.Errorf("denied: %s", got)
	}
}

func TestCheckPublicURL(t *testing.T) {
	for in, want := range map[string]string{"https://relay.example/": "https://relay.example", "http://127.0.0.1:8440": "http://127.0.0.1:8440"} {
		if got, err := CheckPublicURL(in); got != want || err != nil {
			t.Errorf("%s: %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "relay.example", "ftp://relay.example", "https://relay.example/relay", "https://u@relay.example", "https://relay.example/?x", "https://relay.example/#f"} {
		if _, err := CheckPublicURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := New(Config{PublicURL: public, PanelURL: "javascript:x"}); err != ErrPanelURL {
		t.Errorf("panel URL: %v", err)
	}
}

func TestGrantedScope(t *testing.T) {
	for tools, want := range map[string]string{"*": "read run write all", "process.jobs": "", "process.*,files.*,system.metrics": "read run write"} {
		if got := grantedScope(strings.Split(tools, ",")); got != want {
			t.Errorf("%s: %q, want %q", tools, got, want)
		}
	}
}

func FuzzParseForm(f *testing.F) {
	f.Add([]byte("grant_type=authorization_code&code=cac_x&code_verifier=abc"))
	f.Add([]byte("a=1&a=2"))
	f.Add([]byte("%zz"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseForm(data)
		if err != nil {
			return
		}
		for k, vs := range v {
			if len(vs) != 1 {
				t.Fatalf("%q: %q repeated", data, k)
			}
		}
	})
}

func FuzzDecodeRegistration(f *testing.F) {
	f.Add([]byte(`{"redirect_uris":["https://c.example/cb"],"client_name":"C"}`))
	f.Add([]byte(`{"redirect_uris":["http://127.0.0.1/cb","com.x:/cb"],"grant_types":["authorization_code"]}`))
	f.Add([]byte(`{"redirect_uris":["javascript:alert(1)"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeRegistration(data)
		if err != nil {
			if err.code != ErrInvalidRedirectURI && err.code != ErrInvalidClientMetadata {
				t.Fatalf("%q: code %q", data, err.code)
			}
			return
		}
		if len(c.RedirectURIs) == 0 || len(c.RedirectURIs) > limits.OAuthMaxRedirectURIs {
			t.Fatalf("%q: %d redirect URIs", data, len(c.RedirectURIs))
		}
		for _, u := range c.RedirectURIs {
			if !ValidRedirectURI(u) {
				t.Fatalf("%q: accepted redirect %q", data, u)
			}
		}
	})
}

func TestCORSAndBasicAuth(t *testing.T) {
	f := newFixture(t, nil)
	req, _ := http.NewRequest(http.MethodOptions, f.hs.URL+TokenPath, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, err := http.Get(f.hs.URL + ResourceMetadataPath + "/mcp/" + url.PathEscape("not a name")); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("metadata of no device's URL: %v %v", resp.StatusCode, err)
	}
	// HTTP Basic with the client ID as user and no password, as
	// golang.org/x/oauth2 tries first.
	id := f.register(t, loopback)
	form := codeForm("", f.code(t, id, loopback), loopback)
	form.Del("client_id")
	post := func(user, pass string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, f.hs.URL+TokenPath, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
		req.SetBasicAuth(url.QueryEscape(user), pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("invalid_client after HTTP authentication without a Basic challenge: %v", resp.Header)
		}
		return resp.StatusCode
	}
	if status := post(id, "a secret"); status != http.StatusUnauthorized {
		t.Errorf("Basic with a secret: %d", status)
	}
	if status := post(id, ""); status != http.StatusOK {
		t.Errorf("Basic with the client ID: %d", status)
	}
}

func TestStateUnavailable(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, st)
	id := f.register(t, loopback)
	st.Close()
	resp, err := http.Post(f.hs.URL+RegisterPath, "application/json", strings.NewReader(`{"redirect_uris":["`+loopback+`"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("register: %d", resp.StatusCode)
	}
	if resp := f.authorize(t, authParams(id, loopback)); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Location") != "" {
		t.Errorf("authorize: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	status, body := f.post(t, TokenPath, codeForm(id, "cac_"+strings.Repeat("A", 43), loopback))
	wantError(t, "token", status, body, http.StatusServiceUnavailable, ErrTemporarilyUnavailable)
	status, body = f.post(t, RevokePath, url.Values{"token": {"ccr_tok_000000000000_" + strings.Repeat("A", 43)}})
	wantError(t, "revoke", status, body, http.StatusServiceUnavailable, ErrTemporarilyUnavailable)
	if f.srv.Issuer() != public {
		t.Errorf("issuer: %s", f.srv.Issuer())
	}
}

func TestRedirectURIs(t *testing.T) {
	for u, want := range map[string]bool{
		"https://c.example/cb": true, "https://c.example/cb?x=1": true, "http://127.0.0.1/cb": true, "http://[::1]:8/cb": true,
		"http://localhost:5/cb": true, "com.example.app:/cb": true, "cursor://anysphere.cursor-mcp/oauth/callback": true,
		"": false, "http://c.example/cb": false, "http://127.0.0.2.example/cb": false, "https:///cb": false, "https://c.example/cb#f": false,
		"javascript:alert(1)": false, "data:text/html,x": false, "file:///etc/passwd": false, "https://u:p@c.example/cb": false,
		"/cb": false, "https://c.example/c b": false, "https://c.example/" + strings.Repeat("x", store.MaxOAuthTextBytes): false,
		"https://c.example/" + strings.Repeat("x", store.MaxOAuthTextBytes-len("https://c.example/")): true,
		"myapp:cb": true, "myapp://host": true, "myapp:": false, "http://10.0.0.1/cb": false, "http://[::ffff:127.0.0.1]:8/cb": true,
	} {
		if got := ValidRedirectURI(u); got != want {
			t.Errorf("ValidRedirectURI(%q) = %v", u, got)
		}
	}
	registered := []string{"http://127.0.0.1/cb?a=1", "https://c.example/cb", "http://[::1]:7/x", "https://127.0.0.1/z", "%zz"}
	for u, want := range map[string]bool{
		"https://c.example/cb": true, "http://127.0.0.1/cb?a=1": true, "http://127.0.0.1:65535/cb?a=1": true, "http://[::1]/x": true,
		"https://c.example:444/cb": false, "http://127.0.0.1:0/cb?a=1": false, "http://127.0.0.1:65536/cb?a=1": false,
		"http://127.0.0.1:8/cb?a=2": false, "http://127.0.0.1:8/cb": false, "http://127.0.0.1:8/cb?a=1&b": false,
		"http://127.0.0.1:8/CB?a=1": false, "http://[::1]:8/y": false, "https://c.example/cb?": false,
		"http://127.0.0.1:9/z": false, "http://localhost:8/cb?a=1": false,
	} {
		if got := matchRedirect(registered, u); got != want {
			t.Errorf("matchRedirect(%q) = %v", u, got)
		}
	}
}
