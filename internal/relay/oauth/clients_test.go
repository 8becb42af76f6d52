package oauth

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// claude.ai's web connector sends /register, /authorize and /token to the
// MCP server's origin whatever the metadata says (anthropics/claude-ai-mcp
// #82, #283, #481, #962), and its back end, python httpx, follows no
// redirect: every endpoint answers at the origin, in place.
func TestEndpointsAnswerAtTheOriginInPlace(t *testing.T) {
	f := newFixture(t, nil)
	for _, prefix := range []string{"", "/oauth"} {
		body := `{"redirect_uris":["https://claude.ai/api/mcp/auth_callback"],"client_name":"claudeai","token_endpoint_auth_method":"client_secret_post","scope":"claudeai"}`
		resp, err := noFollow.Post(f.hs.URL+prefix+"/register", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var reg map[string]any
		json.NewDecoder(resp.Body).Decode(&reg)
		resp.Body.Close()
		id, _ := reg["client_id"].(string)
		if resp.StatusCode != http.StatusCreated || id == "" || reg["client_secret"] != nil || reg["token_endpoint_auth_method"] != "none" {
			t.Fatalf("%s/register: %d %v", prefix, resp.StatusCode, reg)
		}
		q := authParams(id, "https://claude.ai/api/mcp/auth_callback")
		resp, err = noFollow.Get(f.hs.URL + prefix + "/authorize?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		reqID, ok := strings.CutPrefix(resp.Header.Get("Location"), panelURL+"consent/")
		if resp.StatusCode != http.StatusFound || !ok {
			t.Fatalf("%s/authorize: %d %q", prefix, resp.StatusCode, resp.Header.Get("Location"))
		}
		code, _, err := f.st.ApproveAuthRequest(reqID, spec, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		form := codeForm(id, code, "https://claude.ai/api/mcp/auth_callback")
		resp, err = noFollow.PostForm(f.hs.URL+prefix+"/token", form)
		if err != nil {
			t.Fatal(err)
		}
		var tok map[string]any
		json.NewDecoder(resp.Body).Decode(&tok)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || tok["access_token"] == nil || tok["refresh_token"] == nil {
			t.Fatalf("%s/token: %d %v", prefix, resp.StatusCode, tok)
		}
		resp, err = noFollow.PostForm(f.hs.URL+prefix+"/revoke", url.Values{"token": {tok["refresh_token"].(string)}, "client_id": {id}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s/revoke: %d", prefix, resp.StatusCode)
		}
		if _, err := f.st.AuthToken(tok["access_token"].(string), time.Now()); err == nil {
			t.Errorf("%s/revoke left the access token valid", prefix)
		}
	}
	// Only the endpoints' own methods and paths.
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/token"}, {http.MethodGet, "/register"}, {http.MethodPost, "/authorize"}, {http.MethodGet, "/oauth/other"},
	} {
		req, _ := http.NewRequest(tc.method, f.hs.URL+tc.path, nil)
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed && resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s: %d", tc.method, tc.path, resp.StatusCode)
		}
	}
	want := []string{"/authorize", "/token", "/register", "/revoke", "/oauth/authorize", "/oauth/token", "/oauth/register", "/oauth/revoke"}
	if got := EndpointPaths(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("EndpointPaths: %v", got)
	}
}

// Scopes clients really send: revision 2026-07-28's offline_access; the
// same with claude.ai's leading space (anthropics/claude-ai-mcp #453);
// "read write", claude.ai's hard-coded pair (#42); "claudeai"
// (modelcontextprotocol/modelcontextprotocol #653); OpenID's; a server
// name. None is refused: unknown names are left out, and the consent page
// decides.
func TestScopesClientsSendAreNeverRefused(t *testing.T) {
	f := newFixture(t, nil)
	id := f.register(t, "https://client.example/cb")
	for scope, kept := range map[string]string{
		"offline_access":         "",
		" offline_access":        "",
		"read write":             "read write",
		"claudeai":               "",
		"openid profile":         "",
		"mcp":                    "",
		"run offline_access":     "run",
		"all read run write x y": "all read run write",
	} {
		q := authParams(id, "https://client.example/cb")
		q.Set("scope", scope)
		reqID := f.consent(t, q)
		_, req, err := f.st.ApproveAuthRequest(reqID, spec, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if req.Scope != kept {
			t.Errorf("scope %q kept as %q, want %q", scope, req.Scope, kept)
		}
	}
}

// claude.ai sends as resource exactly the URL the person typed, a
// trailing '/' included: it names the same resource, and the token is
// bound to the URL without it.
func TestResourceAsTyped(t *testing.T) {
	f := newFixture(t, nil)
	redirect := "https://client.example/cb"
	id := f.register(t, redirect)
	for _, typed := range []string{resource + "/", public + "/mcp/"} {
		q := authParams(id, redirect)
		q.Set("resource", typed)
		reqID := f.consent(t, q)
		code, req, err := f.st.ApproveAuthRequest(reqID, spec, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		want := strings.TrimSuffix(typed, "/")
		if req.Resource != want {
			t.Errorf("%s kept as %s", typed, req.Resource)
		}
		form := codeForm(id, code, redirect)
		form.Set("resource", typed)
		status, body := f.post(t, TokenPath, form)
		if status != http.StatusOK {
			t.Fatalf("token for %s: %d %v", typed, status, body)
		}
		tok, err := f.st.AuthToken(body["access_token"].(string), time.Now())
		if err != nil || tok.Resource != want {
			t.Errorf("token for %s: %+v %v", typed, tok, err)
		}
		// A refresh naming it either way keeps the connection.
		status, body = f.post(t, TokenPath, url.Values{"grant_type": {"refresh_token"}, "client_id": {id},
			"refresh_token": {body["refresh_token"].(string)}, "resource": {want}})
		if status != http.StatusOK {
			t.Errorf("refresh for %s: %d %v", want, status, body)
		}
	}
	for _, bad := range []string{resource + "//", resource + "/x", public + "/mcp//"} {
		q := authParams(id, redirect)
		q.Set("resource", bad)
		loc, _ := url.Parse(f.authorize(t, q).Header.Get("Location"))
		if loc.Query().Get("error") != ErrInvalidTarget {
			t.Errorf("resource %s: %v", bad, loc)
		}
	}
}

// Parameters an endpoint does not know are ignored, as RFC 6749 3.1 and
// RFC 7591 2 ask; a client that sends its own (prompt, nonce, a
// registration's logo_uri) is served.
func TestUnknownParametersAreIgnored(t *testing.T) {
	f := newFixture(t, nil)
	resp, err := noFollow.Post(f.hs.URL+"/register", "application/json", strings.NewReader(
		`{"redirect_uris":["https://client.example/cb"],"client_name":"x","logo_uri":"https://client.example/l.png","software_id":"s","jwks":{"keys":[]}}`))
	if err != nil {
		t.Fatal(err)
	}
	var reg map[string]any
	json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	id, _ := reg["client_id"].(string)
	if resp.StatusCode != http.StatusCreated || id == "" {
		t.Fatalf("register with unknown members: %d %v", resp.StatusCode, reg)
	}
	q := authParams(id, "https://client.example/cb")
	q.Set("prompt", "consent")
	q.Set("nonce", "n-1")
	q.Set("access_type", "offline")
	reqID := f.consent(t, q)
	code, _, err := f.st.ApproveAuthRequest(reqID, spec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	form := codeForm(id, code, "https://client.example/cb")
	form.Set("scope", "whatever")
	form.Set("audience", "x")
	status, body := f.post(t, TokenPath, form)
	if status != http.StatusOK {
		t.Fatalf("a token request with unknown parameters: %d %v", status, body)
	}
	status, _ = f.post(t, RevokePath, url.Values{"token": {body["access_token"].(string)}, "token_type_hint": {"refresh_token"}, "extra": {"1"}})
	if status != http.StatusOK {
		t.Errorf("a revocation with unknown parameters: %d", status)
	}
}
