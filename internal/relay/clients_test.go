package relay

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// oauthConnect runs a client's sign-in for resource through the relay's
// own endpoints at its origin (a registration, the authorization request,
// the person's Allow, the code redeemed) and returns the access and
// refresh tokens and the client's ID.
func (h *oauthHarness) oauthConnect(t *testing.T, resource string) (access, refresh, client string) {
	t.Helper()
	resp, err := noRedirects.Post(h.hs.URL+"/register", "application/json",
		strings.NewReader(`{"redirect_uris":["`+callbackURL+`"],"client_name":"habits"}`))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ClientID string `json:"client_id"`
	}
	json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	const verifier = "dBjftJeZ4CVP-mJ92K9qxabcdefghijklmnopqrstuvwxyz0123"
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"client_id": {reg.ClientID}, "redirect_uri": {callbackURL}, "response_type": {"code"}, "state": {"s"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}, "resource": {resource}}
	resp, err = noRedirects.Get(h.hs.URL + "/authorize?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id, ok := strings.CutPrefix(resp.Header.Get("Location"), h.hs.URL+"/panel/consent/")
	if !ok {
		t.Fatalf("authorize: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	code, _, err := h.st.ApproveAuthRequest(id, consentSpec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	resp, err = noRedirects.PostForm(h.hs.URL+"/token", url.Values{"grant_type": {"authorization_code"}, "client_id": {reg.ClientID},
		"code": {code}, "redirect_uri": {callbackURL}, "code_verifier": {verifier}, "resource": {resource}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		Access  string `json:"access_token"`
		Refresh string `json:"refresh_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || tok.Access == "" {
		t.Fatalf("token: %d %v", resp.StatusCode, err)
	}
	return tok.Access, tok.Refresh, reg.ClientID
}

// rpc posts one JSON-RPC request to path and returns the response.
func (h *harness) rpc(t *testing.T, path, bearer, body string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.hs.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	for k, vs := range header {
		req.Header[k] = vs
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

const callStart = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"process.start","arguments":{"command":"true"}}}`

// A person typed the URL with a trailing '/': claude.ai sends it as the
// resource, and calls it as typed.
func TestEndpointAsTyped(t *testing.T) {
	h := newOAuthHarness(t, nil)
	access, _, _ := h.oauthConnect(t, h.hs.URL+"/mcp/dev/")
	for _, path := range []string{"/mcp/dev/", "/mcp/dev"} {
		resp, body := h.rpc(t, path, access, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"process.jobs"`) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	// The token is for the device's URL, not for /mcp/ typed either way.
	if resp, _ := h.rpc(t, "/mcp/", access, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/mcp/: %d", resp.StatusCode)
	}
	// Unauthenticated, the slash's own metadata.
	resp, _ := h.rpc(t, "/mcp/dev/", "", `{}`, nil)
	if got := resp.Header.Get("WWW-Authenticate"); !strings.Contains(got, `/.well-known/oauth-protected-resource/mcp/dev/"`) {
		t.Errorf("challenge at /mcp/dev/: %q", got)
	}
	if resp, _ := h.rpc(t, "/mcp/dev/x", access, `{}`, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/mcp/dev/x: %d", resp.StatusCode)
	}
}

// What a client is told when it is refused: a tool outside its grant is
// that tool's failure, saying so (not "unknown tool"); a tool the relay
// has not is the protocol's unknown tool; a revoked token's 401 says
// invalid_token and its body is a JSON-RPC error.
func TestWhatARefusedClientReads(t *testing.T) {
	h := newOAuthHarness(t, nil)
	access, refresh, _ := h.oauthConnect(t, h.hs.URL+"/mcp/dev")
	resp, body := h.rpc(t, "/mcp/dev", access, callStart, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"isError":true`) || !strings.Contains(body, `"code":"permission_denied"`) ||
		!strings.Contains(body, "process.start is a tool of this relay, but this client's grant does not include it") || strings.Contains(body, "unknown tool") {
		t.Errorf("outside the grant: %d %s", resp.StatusCode, body)
	}
	h.srv.audit.flush()
	rows, err := h.st.Audit(10)
	if err != nil || len(rows) == 0 || rows[len(rows)-1].Tool != "process.start" || rows[len(rows)-1].Code != "permission_denied" {
		t.Errorf("audit: %+v %v", rows, err)
	}
	_, body = h.rpc(t, "/mcp/dev", access, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"no.such","arguments":{}}}`, nil)
	if !strings.Contains(body, `"code":-32602`) || !strings.Contains(body, `unknown tool \"no.such\"`) {
		t.Errorf("unknown tool: %s", body)
	}

	// Without a token: the challenge, with no error (RFC 6750 3.1).
	resp, body = h.rpc(t, "/mcp/dev", "", callStart, nil)
	if resp.StatusCode != http.StatusUnauthorized || strings.Contains(resp.Header.Get("WWW-Authenticate"), "error=") {
		t.Errorf("no token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	wantRPCError(t, "no token", body, "permission_denied")

	resp, err = noRedirects.PostForm(h.hs.URL+"/revoke", url.Values{"token": {refresh}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, body = h.rpc(t, "/mcp/dev", access, callStart, nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), `Bearer error="invalid_token", resource_metadata="`) {
		t.Errorf("revoked: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	wantRPCError(t, "revoked", body, "permission_denied")

	// A static token outside its scope reads the same.
	_, static, err := h.st.CreateToken(store.TokenSpec{Name: "ci", Devices: []string{"*"}, Tools: []string{"process.jobs"}, TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, body := h.rpc(t, "/mcp/dev", static, callStart, nil); !strings.Contains(body, "process.start is a tool of this relay") {
		t.Errorf("static token outside its scope: %s", body)
	}
}

func wantRPCError(t *testing.T, what, body, code string) {
	t.Helper()
	var e struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    struct {
				Code string `json:"code"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.JSONRPC != "2.0" || string(e.ID) != "null" || e.Error.Code != -32000 ||
		e.Error.Message == "" || e.Error.Data.Code != code {
		t.Errorf("%s: the body is not a JSON-RPC error with data.code %s: %s", what, code, body)
	}
}

// The Streamable HTTP transport: a request whose Origin is present and not
// allowed is refused with 403, a valid token or not (DNS rebinding, a page
// of another site).
func TestOriginChecked(t *testing.T) {
	h := newOAuthHarness(t, nil)
	_, static, err := h.st.CreateToken(store.TokenSpec{Name: "ci", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	// No origin allowed yet: any Origin is refused, none is served.
	if resp, _ := h.rpc(t, "/mcp/dev", static, list, http.Header{"Origin": {h.hs.URL}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("before any is allowed: %d", resp.StatusCode)
	}
	if err := h.srv.SetAllowedOrigins("https://relay.example:443", []string{"http://localhost:6274"}); err != nil {
		t.Fatal(err)
	}
	for origin, want := range map[string]int{
		"":                       http.StatusOK,
		"https://relay.example":  http.StatusOK,
		"HTTPS://Relay.Example":  http.StatusOK,
		"http://localhost:6274":  http.StatusOK,
		"http://localhost:6275":  http.StatusForbidden,
		"https://evil.example":   http.StatusForbidden,
		"http://relay.example":   http.StatusForbidden,
		"null":                   http.StatusForbidden,
		"https://relay.example/": http.StatusForbidden,
	} {
		var hdr http.Header
		if origin != "" {
			hdr = http.Header{"Origin": {origin}}
		}
		resp, body := h.rpc(t, "/mcp/dev", static, list, hdr)
		if resp.StatusCode != want {
			t.Errorf("Origin %q: %d, want %d", origin, resp.StatusCode, want)
		}
		if want == http.StatusForbidden {
			wantRPCError(t, "Origin "+origin, body, "permission_denied")
		}
	}
	if resp, _ := h.rpc(t, "/mcp/dev", static, list, http.Header{"Origin": {"https://relay.example", "https://relay.example"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("two Origin headers: %d", resp.StatusCode)
	}
	for _, bad := range []string{"relay.example", "https://relay.example/path", "ftp://relay.example", "https://"} {
		if err := h.srv.SetAllowedOrigins("", []string{bad}); err != ErrAllowedOrigin {
			t.Errorf("allowed origin %q: %v", bad, err)
		}
	}
}

// refreshAt posts a refresh of token to the relay's token endpoint.
func (h *oauthHarness) refreshAt(t *testing.T, client, refresh string) (int, map[string]any) {
	resp, err := noRedirects.PostForm(h.hs.URL+"/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh},
		"client_id": {client}})
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// Two processes sharing one credential, or a retry after a lost answer,
// refresh twice at once; people using a remote MCP server from ChatGPT
// report "connection expired" over and over when such a refresh revokes
// (desktop-commander/remote-desktop-commander #1). Both refreshes get
// tokens, the connection lives on for its whole lifetime, and only a
// presentation after the grace revokes it, audited.
func TestTwoRefreshesAtOnceKeepTheConnection(t *testing.T) {
	h := newOAuthHarness(t, nil)
	_, refresh, client := h.oauthConnect(t, h.hs.URL+"/mcp/dev")
	type answer struct {
		status int
		body   map[string]any
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			status, body := h.refreshAt(t, client, refresh)
			answers <- answer{status, body}
		}()
	}
	var next []string
	for range 2 {
		a := <-answers
		if a.status != http.StatusOK {
			t.Fatalf("a refresh at once: %d %v", a.status, a.body)
		}
		if s, _ := h.mcpStatus(t, "/mcp/dev", a.body["access_token"].(string)); s != http.StatusOK {
			t.Errorf("its access token: %d", s)
		}
		next = append(next, a.body["refresh_token"].(string))
	}
	if got := h.auditTools(t); strings.Join(got, " ") != "oauth.token/ok/ oauth.refresh/ok/ oauth.refresh/ok/" {
		t.Errorf("audit: %v", got)
	}
	// Its whole chosen lifetime (a day here), each access token an hour.
	cur := next[0]
	for range 4 {
		h.skip(5 * time.Hour)
		status, body := h.refreshAt(t, client, cur)
		if status != http.StatusOK {
			t.Fatalf("a refresh within the connection's life: %d %v", status, body)
		}
		cur = body["refresh_token"].(string)
	}
	// The first refresh token after its grace: the connection ends, the
	// other chain with it.
	h.skip(limits.OAuthRefreshGrace)
	if status, body := h.refreshAt(t, client, refresh); status != http.StatusBadRequest || body["error"] != "invalid_grant" {
		t.Fatalf("after the grace: %d %v", status, body)
	}
	if status, _ := h.refreshAt(t, client, cur); status != http.StatusBadRequest {
		t.Errorf("the connection outlived a reuse: %d", status)
	}
	if got := h.auditTools(t); !slices.Contains(got, "oauth.refresh/failed/reused") {
		t.Errorf("audit after the reuse: %v", got)
	}
}

// The SDK answers prompts/list and resources/list, with none of each, so
// the relay declares both (revision 2026-07-28's server/discover is held
// to the methods a server answers: the conformance suite's
// sep-2575-server-declares-prompts-in-discover), besides logging and tools.
func TestCapabilitiesDeclareWhatIsAnswered(t *testing.T) {
	h := newHarness(t, nil)
	s := h.connect(t, "/mcp", nil)
	caps := s.InitializeResult().Capabilities
	if caps.Prompts == nil || caps.Resources == nil || caps.Tools == nil || caps.Logging == nil {
		t.Fatalf("capabilities: %+v", caps)
	}
	prompts, err := s.ListPrompts(context.Background(), nil)
	if err != nil || len(prompts.Prompts) != 0 {
		t.Errorf("prompts/list: %+v %v", prompts, err)
	}
	resources, err := s.ListResources(context.Background(), nil)
	if err != nil || len(resources.Resources) != 0 {
		t.Errorf("resources/list: %+v %v", resources, err)
	}
}
