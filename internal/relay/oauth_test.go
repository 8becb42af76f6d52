package relay

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/pgtest"
	"github.com/commandcore/commandcore/internal/relay/oauth"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/toolresult"
)

const callbackURL = "http://127.0.0.1:9/callback"

// oauthHarness is a relay with its device "dev" linked (serving
// process.jobs and process.start) and OAuth on, and a TLS server on
// loopback that serves a client ID metadata document the relay trusts.
type oauthHarness struct {
	*harness
	cimd    *httptest.Server
	cimdURL string
	// ahead is how far the relay's clock runs ahead of time.Now.
	ahead *atomic.Int64
}

// skip moves the relay's clock on by d.
func (h *oauthHarness) skip(d time.Duration) { h.ahead.Add(int64(d)) }

func newOAuthHarness(t *testing.T, st *store.Store) *oauthHarness {
	t.Helper()
	ahead := new(atomic.Int64)
	clock := func(s *Server) { s.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) } }
	var h *harness
	if st == nil {
		h = newHarness(t, clock)
	} else {
		h = newHarnessOn(t, st, clock)
	}
	d := fakeDevice()
	schema := map[string]any{"type": "object"}
	for _, name := range []string{"process.jobs", "process.start"} {
		d.AddTool(&mcp.Tool{Name: name, InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return toolresult.Success(map[string]any{"jobs": []any{}}), nil
		})
	}
	h.link(t, d)
	oh := &oauthHarness{harness: h, ahead: ahead}
	oh.cimd = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"client_id": oh.cimdURL, "client_name": "Metadata client",
			"redirect_uris": []string{callbackURL}, "grant_types": []string{"authorization_code", "refresh_token"}, "token_endpoint_auth_method": "none"})
	}))
	t.Cleanup(oh.cimd.Close)
	oh.cimdURL = oh.cimd.URL + "/client.json"
	cas := x509.NewCertPool()
	cas.AddCert(oh.cimd.Certificate())
	if err := h.srv.SetOAuth(OAuthConfig{PublicURL: h.hs.URL, PanelURL: h.hs.URL + "/panel/", PrivateClients: true, ClientCAs: cas}); err != nil {
		t.Fatal(err)
	}
	return oh
}

// consentSpec is what the person allows in these tests: the device, one
// tool.
var consentSpec = store.ConnectionSpec{Devices: []string{"dev"}, Tools: []string{"process.jobs"}, Principal: "alice", TTL: 24 * time.Hour, Admin: "olga"}

// signIn is a client's browser: it opens the authorization URL, reaches
// the consent page's address, and (the page being the panel's) the
// person's Allow is store.ApproveAuthRequest; the browser then comes back
// to the client with the authorization response. After allowed sign-ins
// it refuses.
type signIn struct {
	h       *oauthHarness
	allowed int32
	count   atomic.Int32
}

func (s *signIn) fetch(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
	if s.count.Add(1) > s.allowed {
		return nil, errors.New("the person signs in no more")
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, args.URL, nil)
	resp, err := noRedirects.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	id, ok := strings.CutPrefix(resp.Header.Get("Location"), s.h.hs.URL+"/panel/consent/")
	if resp.StatusCode != http.StatusFound || !ok {
		return nil, fmt.Errorf("authorization endpoint: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	code, ar, err := s.h.st.ApproveAuthRequest(id, consentSpec, time.Now())
	if err != nil {
		return nil, err
	}
	back, err := url.Parse(oauth.Approved(ar.RedirectURI, s.h.hs.URL, ar.State, code))
	if err != nil {
		return nil, err
	}
	q := back.Query()
	return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// tokens remembers the first tokens a handler got, and hands the SDK an
// expired copy, so its first use is a refresh.
type tokens struct {
	mu    sync.Mutex
	first *oauth2.Token
}

func (k *tokens) source(ctx context.Context, cfg *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
	k.mu.Lock()
	k.first = tok
	k.mu.Unlock()
	expired := *tok
	expired.Expiry = time.Unix(1, 0)
	return cfg.TokenSource(ctx, &expired), nil
}

func (k *tokens) get() *oauth2.Token {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.first
}

// mcpStatus posts tools/list to path with bearer and returns the status
// and WWW-Authenticate.
func (h *oauthHarness) mcpStatus(t *testing.T, path, bearer string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.hs.URL+path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
}

// auditTools are the OAuth rows of the audit log, as tool/outcome/code.
func (h *oauthHarness) auditTools(t *testing.T) []string {
	t.Helper()
	h.srv.audit.flush()
	all, err := h.st.Audit(1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range all {
		if strings.HasPrefix(e.Tool, "oauth.") {
			out = append(out, e.Tool+"/"+e.Outcome+"/"+e.Code)
		}
	}
	return out
}

func callJobs(ctx context.Context, s *mcp.ClientSession, tool string) error {
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("%s failed", tool)
	}
	return nil
}

// TestGoSDKClient connects the official Go SDK's OAuth client to a
// device's endpoint from nothing: the 401 sends it to discovery, it
// registers (dynamically, then by a metadata document), signs in, gets
// tokens, refreshes them, and calls what the person allowed and nothing
// else. A replayed refresh token and a revocation each end a connection.
func TestGoSDKClient(t *testing.T) {
	goSDKClient(t, newOAuthHarness(t, nil))
}

// TestGoSDKClientOnPostgres is TestGoSDKClient with the relay's state in
// PostgreSQL, where replicas meet.
func TestGoSDKClientOnPostgres(t *testing.T) {
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
	goSDKClient(t, newOAuthHarness(t, st))
}

func goSDKClient(t *testing.T, h *oauthHarness) {
	ctx := context.Background()
	status, challenge := h.mcpStatus(t, "/mcp/dev", "")
	if status != http.StatusUnauthorized || challenge != `Bearer resource_metadata="`+h.hs.URL+`/.well-known/oauth-protected-resource/mcp/dev", scope="read run write all offline_access"` {
		t.Fatalf("without a token: %d %q", status, challenge)
	}

	// Dynamic registration.
	dcr := &signIn{h: h, allowed: 1}
	kept := &tokens{}
	handler, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{callbackURL}, ClientName: "Go SDK client", GrantTypes: []string{"authorization_code", "refresh_token"}}},
		AuthorizationCodeFetcher: dcr.fetch, NewTokenSource: kept.source,
	})
	if err != nil {
		t.Fatal(err)
	}
	session, err := mcp.NewClient(&mcp.Implementation{Name: "sdk", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: h.hs.URL + "/mcp/dev", OAuthHandler: handler}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	if err := callJobs(ctx, session, "process.jobs"); err != nil {
		t.Fatal(err)
	}
	if err := callJobs(ctx, session, "process.start"); err == nil {
		t.Fatal("a connection allowed process.jobs only called process.start")
	}
	first := kept.get()
	ts, _ := handler.TokenSource(ctx)
	current, err := ts.Token()
	if err != nil || first == nil || current.RefreshToken == first.RefreshToken || current.AccessToken == first.AccessToken {
		t.Fatalf("the SDK did not refresh: %v", err)
	}
	if got := h.auditTools(t); strings.Join(got, " ") != "oauth.token/ok/ oauth.refresh/ok/" {
		t.Fatalf("audit after sign-in and refresh: %v", got)
	}
	// The token is the device endpoint's only (RFC 8707).
	for _, path := range []string{"/mcp", "/mcp/other"} {
		if status, challenge := h.mcpStatus(t, path, current.AccessToken); status != http.StatusUnauthorized || !strings.Contains(challenge, `error="invalid_token"`) {
			t.Errorf("at %s: %d %q", path, status, challenge)
		}
	}
	// The first refresh token, spent, presented again after its grace:
	// the connection ends.
	h.skip(limits.OAuthRefreshGrace)
	resp, err := http.PostForm(h.hs.URL+oauth.TokenPath, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {first.RefreshToken},
		"client_id": {connectionClient(t, h, current.AccessToken)}})
	if err != nil {
		t.Fatal(err)
	}
	var refused struct{ Error string }
	json.NewDecoder(resp.Body).Decode(&refused)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || refused.Error != "invalid_grant" {
		t.Fatalf("replayed refresh token: %d %q", resp.StatusCode, refused.Error)
	}
	if status, _ := h.mcpStatus(t, "/mcp/dev", current.AccessToken); status != http.StatusUnauthorized {
		t.Fatalf("after the replay: %d", status)
	}
	if err := callJobs(ctx, session, "process.jobs"); err == nil || dcr.count.Load() != 2 {
		t.Fatalf("the session still called (sign-ins %d): %v", dcr.count.Load(), err)
	}
	if got := h.auditTools(t); got[len(got)-1] != "oauth.refresh/failed/reused" {
		t.Fatalf("audit after the replay: %v", got)
	}

	// A client ID metadata document, on loopback: the relay was told to
	// allow that, and trusts its CA.
	md := &signIn{h: h, allowed: 1}
	handler, err = auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		ClientIDMetadataDocumentConfig: &auth.ClientIDMetadataDocumentConfig{URL: h.cimdURL},
		RedirectURL:                    callbackURL, AuthorizationCodeFetcher: md.fetch,
	})
	if err != nil {
		t.Fatal(err)
	}
	session2, err := mcp.NewClient(&mcp.Implementation{Name: "sdk", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: h.hs.URL + "/mcp/dev", OAuthHandler: handler}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer session2.Close()
	if err := callJobs(ctx, session2, "process.jobs"); err != nil {
		t.Fatal(err)
	}
	ts, _ = handler.TokenSource(ctx)
	tok, _ := ts.Token()
	conn, err := h.st.AuthToken(tok.AccessToken, time.Now())
	if err != nil || conn.ClientID != h.cimdURL || conn.Client != "Metadata client" || conn.Resource != h.hs.URL+"/mcp/dev" {
		t.Fatalf("the metadata client's connection: %+v %v", conn, err)
	}
	// Revoked (RFC 7009): the next call is refused.
	resp, err = http.PostForm(h.hs.URL+oauth.RevokePath, url.Values{"token": {tok.AccessToken}, "client_id": {h.cimdURL}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	if status, _ := h.mcpStatus(t, "/mcp/dev", tok.AccessToken); status != http.StatusUnauthorized {
		t.Fatalf("after revocation: %d", status)
	}
	if err := callJobs(ctx, session2, "process.jobs"); err == nil {
		t.Fatal("a revoked connection called")
	}
	if got := h.auditTools(t); got[len(got)-1] != "oauth.revoke/ok/" {
		t.Fatalf("audit after revocation: %v", got)
	}

	// A static token never meets OAuth.
	static := h.connect(t, "/mcp/dev", nil)
	if err := callJobs(ctx, static, "process.start"); err != nil {
		t.Fatalf("static token: %v", err)
	}
}

// connectionClient is the client ID of the connection an access token
// opens.
func connectionClient(t *testing.T, h *oauthHarness, access string) string {
	t.Helper()
	tok, err := h.st.AuthToken(access, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok.ClientID
}

// TestOAuthRefusalsAtTheRelay: a wrong redirect URI gets a page and no
// redirect, PKCE plain is refused, a code is good once, a metadata
// document on loopback is refused unless allowed, and a flood of
// registrations is rate-limited.
func TestOAuthRefusalsAtTheRelay(t *testing.T) {
	h := newOAuthHarness(t, nil)
	reg := func() (int, string) {
		resp, err := http.Post(h.hs.URL+oauth.RegisterPath, "application/json", strings.NewReader(`{"redirect_uris":["`+callbackURL+`"],"client_name":"flood"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			ClientID string `json:"client_id"`
		}
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out.ClientID
	}
	status, id := reg()
	if status != http.StatusCreated {
		t.Fatalf("register: %d", status)
	}
	params := func(client, redirect, method string) string {
		return h.hs.URL + oauth.AuthorizePath + "?" + url.Values{"client_id": {client}, "redirect_uri": {redirect}, "response_type": {"code"},
			"code_challenge": {"bwYWJ3EcQwUBuySHnFSM-XTBoFvkpGjyV8X68fEiS3A"}, "code_challenge_method": {method}, "state": {"s"},
			"resource": {h.hs.URL + "/mcp/dev"}}.Encode()
	}
	get := func(u string) *http.Response {
		resp, err := noRedirects.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := get(params(id, "http://evil.example/cb", "S256")); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
		t.Errorf("wrong redirect URI: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp := get(params(id, callbackURL, "plain")); !strings.Contains(resp.Header.Get("Location"), "error=invalid_request") {
		t.Errorf("PKCE plain: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// A code, twice.
	resp := get(params(id, callbackURL, "S256"))
	reqID := strings.TrimPrefix(resp.Header.Get("Location"), h.hs.URL+"/panel/consent/")
	code, _, err := h.st.ApproveAuthRequest(reqID, consentSpec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"grant_type": {"authorization_code"}, "client_id": {id}, "code": {code}, "redirect_uri": {callbackURL},
		"code_verifier": {"dBjftJeZ4CVP-mJ92K9qpWQ4cI8aC7sK7pPJ4l5YJQk"}}
	for i, want := range []int{http.StatusOK, http.StatusBadRequest} {
		resp, err := http.PostForm(h.hs.URL+oauth.TokenPath, form)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("code use %d: %d %s", i+1, resp.StatusCode, body)
		}
	}
	if got := h.auditTools(t); strings.Join(got, " ") != "oauth.token/ok/ oauth.token/failed/reused" {
		t.Errorf("audit: %v", got)
	}
	// A relay not told to allow private clients refuses a document on
	// loopback, whatever CA it trusts.
	if err := h.srv.SetOAuth(OAuthConfig{PublicURL: h.hs.URL, PanelURL: h.hs.URL + "/panel/"}); err != nil {
		t.Fatal(err)
	}
	if resp := get(params(h.cimdURL, callbackURL, "S256")); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
		t.Errorf("metadata document on loopback: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// Registrations share enrollment's rate per address.
	limited := false
	for range enrollBurst + 1 {
		if status, _ := reg(); status == http.StatusTooManyRequests {
			limited = true
		}
	}
	if !limited {
		t.Error("a flood of registrations was not rate-limited")
	}
}
