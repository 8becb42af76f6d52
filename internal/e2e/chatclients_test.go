package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/relay/relaytest"
)

// The chat clients people use cannot run here, so their documented habits
// are written down as sequences of requests, from their public docs and
// trackers, and run against the real relay, its panel and a real agent,
// with the person's consent given in Chromium. Each habit names its
// source where it is used.

// chatClient is a chat client's back end: it follows no redirect
// (claude.ai's is python httpx, which follows none), and sends no Origin
// (it is a server, not a page).
type chatClient struct {
	t      *testing.T
	p      *panelEnv
	http   *http.Client
	typed  string // the MCP URL as the person typed it
	origin string
	// atOrigin builds the endpoints from the MCP server's origin whatever
	// the metadata says, as claude.ai's web connector does
	// (anthropics/claude-ai-mcp #82, #283, #481, #962).
	atOrigin                        bool
	clientID, redirectURI, verifier string
	// challengeScope is what the 401's WWW-Authenticate names.
	challengeScope string
	meta           struct {
		AuthorizationEndpoint string   `json:"authorization_endpoint"`
		TokenEndpoint         string   `json:"token_endpoint"`
		RegistrationEndpoint  string   `json:"registration_endpoint"`
		ScopesSupported       []string `json:"scopes_supported"`
		CIMD                  bool     `json:"client_id_metadata_document_supported"`
		AuthMethods           []string `json:"token_endpoint_auth_methods_supported"`
	}
}

func newChatClient(t *testing.T, p *panelEnv, typed string, atOrigin bool) *chatClient {
	u, err := url.Parse(typed)
	if err != nil {
		t.Fatal(err)
	}
	return &chatClient{t: t, p: p, typed: typed, origin: u.Scheme + "://" + u.Host, atOrigin: atOrigin,
		http: &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		// A fresh PKCE verifier each time.
		verifier: base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("verifier-%d-%s", time.Now().UnixNano(), strings.Repeat("v", 24))))}
}

// getJSON reads a JSON document with the client's no-redirect HTTP.
func (c *chatClient) getJSON(u string, v any) {
	c.t.Helper()
	resp, err := c.http.Get(u)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("GET %s: %d", u, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		c.t.Fatalf("GET %s: %v", u, err)
	}
}

var challengeParam = regexp.MustCompile(`(\w+)="([^"]*)"`)

// discover meets the 401 at the typed URL and reads the protected
// resource's and the authorization server's metadata.
func (c *chatClient) discover() {
	c.t.Helper()
	resp, err := c.http.Post(c.typed, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	params := map[string]string{}
	for _, m := range challengeParam.FindAllStringSubmatch(resp.Header.Get("WWW-Authenticate"), -1) {
		params[m[1]] = m[2]
	}
	if resp.StatusCode != http.StatusUnauthorized || params["resource_metadata"] == "" {
		c.t.Fatalf("%s without a token: %d %q", c.typed, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	c.challengeScope = params["scope"]
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	c.getJSON(params["resource_metadata"], &prm)
	// RFC 9728 3.3: the resource is the URL the metadata was asked for.
	if prm.Resource != c.typed || len(prm.AuthorizationServers) != 1 {
		c.t.Fatalf("protected resource metadata for %s: %+v", c.typed, prm)
	}
	c.getJSON(prm.AuthorizationServers[0]+"/.well-known/oauth-authorization-server", &c.meta)
	if c.atOrigin {
		c.meta.AuthorizationEndpoint, c.meta.TokenEndpoint, c.meta.RegistrationEndpoint = c.origin+"/authorize", c.origin+"/token", c.origin+"/register"
	}
}

// register registers dynamically with this body (RFC 7591).
func (c *chatClient) register(body map[string]any) map[string]any {
	c.t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := c.http.Post(c.meta.RegistrationEndpoint, "application/json", strings.NewReader(string(raw)))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusCreated {
		c.t.Fatalf("registration at %s: %d %v", c.meta.RegistrationEndpoint, resp.StatusCode, out)
	}
	c.clientID, _ = out["client_id"].(string)
	return out
}

// authorizeURL is the authorization request the client sends the person's
// browser to.
func (c *chatClient) authorizeURL(scope, resource, state string) string {
	sum := sha256.Sum256([]byte(c.verifier))
	q := url.Values{"response_type": {"code"}, "client_id": {c.clientID}, "redirect_uri": {c.redirectURI}, "state": {state},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}, "resource": {resource}}
	if scope != "" {
		q.Set("scope", scope)
	}
	return c.meta.AuthorizationEndpoint + "?" + q.Encode()
}

// consent opens the authorization URL in Chromium: signed out, the person
// signs in with a code and comes back; on the consent page choose ticks
// what they allow (it may check what the page preselected first); Allow
// sends the browser to the client's redirect URI, which the browser
// answers itself (callbacks). It returns the authorization response.
func (c *chatClient) consent(authURL string, callbacks <-chan string, choose func()) url.Values {
	c.t.Helper()
	b := c.p.b
	b.open(authURL)
	if eval[string](b, "location.pathname") == "/panel/login" {
		link, err := url.Parse(c.p.relayCmd("admin", "create", "alice"))
		if err != nil {
			c.t.Fatal(err)
		}
		b.fill("#code", link.Query().Get("code"))
		b.submit("#signin")
	}
	b.await("the consent page", `location.pathname.startsWith('/panel/consent/') && !!document.querySelector('#allow')`, 10*time.Second)
	choose()
	b.submit("#allow")
	select {
	case back := <-callbacks:
		u, err := url.Parse(back)
		if err != nil || !strings.HasPrefix(back, c.redirectURI+"?") {
			c.t.Fatalf("the browser went to %s, not the client's redirect URI %s", back, c.redirectURI)
		}
		return u.Query()
	case <-time.After(30 * time.Second):
		c.t.Fatal("the browser never reached the client's redirect URI")
		return nil
	}
}

// token posts a token request, as the client authenticates (RFC 6749
// client_secret_post with whatever secret it holds, or none).
func (c *chatClient) token(form url.Values) (int, map[string]any) {
	c.t.Helper()
	form.Set("client_id", c.clientID)
	resp, err := c.http.PostForm(c.meta.TokenEndpoint, form)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// redeem spends the code for tokens.
func (c *chatClient) redeem(code, resource string) (access, refresh string) {
	c.t.Helper()
	status, out := c.token(url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {c.redirectURI},
		"code_verifier": {c.verifier}, "resource": {resource}})
	access, _ = out["access_token"].(string)
	refresh, _ = out["refresh_token"].(string)
	if status != http.StatusOK || access == "" || refresh == "" {
		c.t.Fatalf("the code at %s: %d %v", c.meta.TokenEndpoint, status, out)
	}
	return access, refresh
}

// session connects an MCP client speaking version with the access token,
// declaring no elicitation.
func (c *chatClient) session(ctx context.Context, endpoint, access, version string) *mcp.ClientSession {
	c.t.Helper()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "chat-client", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: relaytest.HTTPClient(access)}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		c.t.Fatalf("connect to %s: %v", endpoint, err)
	}
	c.t.Cleanup(func() { s.Close() })
	return s
}

// clientMetadataSite is a client's HTTPS site on loopback serving client ID
// metadata documents, whose CA the relay is told to trust.
type clientMetadataSite struct {
	srv    *httptest.Server
	caFile string
	mu     sync.Mutex
	docs   map[string]map[string]any
}

func newClientMetadataSite(t *testing.T) *clientMetadataSite {
	s := &clientMetadataSite{docs: map[string]map[string]any{}}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		doc, ok := s.docs[r.URL.Path]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(s.srv.Close)
	s.caFile = filepath.Join(t.TempDir(), "client-ca.pem")
	if err := os.WriteFile(s.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// publish serves doc at path, its client_id the URL, and returns the URL.
func (s *clientMetadataSite) publish(path string, doc map[string]any) string {
	u := s.srv.URL + path
	doc["client_id"] = u
	s.mu.Lock()
	s.docs[path] = doc
	s.mu.Unlock()
	return u
}

// startChatRelay is the relay with its panel and an agent, trusting the
// client metadata site, with a short call wait so a cut wait is seen in
// seconds.
func startChatRelay(t *testing.T) (*panelEnv, *clientMetadataSite) {
	site := newClientMetadataSite(t)
	p := startPanel(t, "--oauth-private-clients", "--oauth-client-ca", site.caFile, "--max-call-wait", "3s")
	return p, site
}

// ticked are the presets the consent page has ticked.
func ticked(b *browser) string {
	return eval[string](b, `[...document.querySelectorAll('input[name=preset]:checked')].map(i => i.value).join(' ')`)
}

// tickPresets leaves exactly these presets ticked, and no single tool.
func tickPresets(b *browser, presets ...string) {
	list, _ := json.Marshal(presets)
	eval[bool](b, fmt.Sprintf(`document.querySelectorAll('input[name=preset]').forEach(i => i.checked = %s.includes(i.value)),
		document.querySelectorAll('input[name=tool]').forEach(i => i.checked = false), true`, list))
}

func callOK(t *testing.T, ctx context.Context, s *mcp.ClientSession, tool string, args map[string]any) (map[string]any, string) {
	t.Helper()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("%s: %v %+v", tool, err, res)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out map[string]any
	json.Unmarshal(raw, &out)
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return out, text.String()
}

// TestClaudeAIWebConnector runs claude.ai's web connector as its public
// tracker and docs describe it, twice through one relay: with dynamic
// registration at the server's origin, and with its client ID metadata
// document. Both times its back end builds /register, /authorize and
// /token on the MCP server's origin whatever the metadata says
// (anthropics/claude-ai-mcp #82, #283, #481, #962), follows no redirect,
// sends as resource exactly the URL the person typed, trailing '/'
// included, asks for scopes_supported in its order, is sent back to
// https://claude.ai/api/mcp/auth_callback, negotiates 2025-11-25 and
// declares no elicitation. The person allows running commands; the model
// starts a job that reads a password, asks for it with secret_prompt and
// gets the panel's link as a successful result (no elicitation), the
// person types it in the panel, and the model sees the job read it; a
// wait longer than the relay's call wait returns at it, saying to call
// again; a tool outside the grant says so; two refreshes at once both
// succeed.
func TestClaudeAIWebConnector(t *testing.T) {
	p, site := startChatRelay(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const callback = "https://claude.ai/api/mcp/auth_callback"
	callbacks := p.b.answerFor("https://claude.ai/")

	for _, reg := range []string{"dynamic registration", "client ID metadata document"} {
		t.Run(reg, func(t *testing.T) {
			p.b = p.b.with(t)
			typed := p.url + "/mcp/dev1/"
			c := newChatClient(t, p, typed, true)
			c.redirectURI = callback
			c.discover()
			if reg == "dynamic registration" {
				// claude.ai registers as a confidential client (client_secret_post)
				// and does without a secret when the answer says none.
				out := c.register(map[string]any{"client_name": "claudeai", "redirect_uris": []string{callback},
					"grant_types": []string{"authorization_code", "refresh_token"}, "response_types": []string{"code"},
					"token_endpoint_auth_method": "client_secret_post", "scope": "claudeai"})
				if out["client_secret"] != nil || out["token_endpoint_auth_method"] != "none" {
					t.Fatalf("the registration's answer: %v", out)
				}
			} else {
				// claude.ai uses its metadata document when the server says it
				// supports them and takes public clients (none).
				if !c.meta.CIMD || !strings.Contains(strings.Join(c.meta.AuthMethods, " "), "none") {
					t.Fatalf("the metadata does not offer what claude.ai needs for its document: %+v", c.meta)
				}
				c.clientID = site.publish("/oauth/mcp-oauth-client-metadata", map[string]any{"client_name": "Claude",
					"redirect_uris": []string{callback, "https://claude.com/api/mcp/auth_callback"},
					"grant_types":   []string{"authorization_code", "refresh_token"}, "token_endpoint_auth_method": "none"})
			}
			scope := strings.Join(c.meta.ScopesSupported, " ")
			if scope != "read run write all offline_access" || c.challengeScope != scope {
				t.Errorf("scopes_supported %q, the 401's scope %q", scope, c.challengeScope)
			}
			back := c.consent(c.authorizeURL(scope, typed, "claude-state"), callbacks, func() {
				// Asked for every scope, the page preselects reading only.
				if got := ticked(p.b); got != "read" {
					t.Errorf("asked for %q, the page ticked %q", scope, got)
				}
				if got := p.b.text("#redirect-host"); got != "claude.ai" {
					t.Errorf("the page says the answer goes to %q", got)
				}
				tickPresets(p.b, "run")
			})
			if back.Get("state") != "claude-state" || back.Get("iss") != p.url || back.Get("code") == "" {
				t.Fatalf("the authorization response: %v", back)
			}
			access, refresh := c.redeem(back.Get("code"), typed)
			s := c.session(ctx, typed, access, "2025-11-25")
			claudeUses(t, ctx, p, s)

			// Two refreshes at once (a retry after a lost answer): both get
			// tokens, and the connection lives on.
			type answer struct {
				status int
				out    map[string]any
			}
			answers := make(chan answer, 2)
			for range 2 {
				go func() {
					status, out := c.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}, "resource": {typed}})
					answers <- answer{status, out}
				}()
			}
			for range 2 {
				a := <-answers
				next, _ := a.out["access_token"].(string)
				if a.status != http.StatusOK || next == "" {
					t.Fatalf("a refresh at once: %d %v", a.status, a.out)
				}
				callOK(t, ctx, c.session(ctx, typed, next, "2025-11-25"), "process.jobs", map[string]any{})
			}
		})
	}
}

// claudeUses is what a model does through claude.ai's connection: a job
// that reads a password, the password asked of the person, a long wait,
// and a tool outside the grant.
func claudeUses(t *testing.T, ctx context.Context, p *panelEnv, s *mcp.ClientSession) {
	job, _ := callOK(t, ctx, s, "process.start", map[string]any{"stdin": true,
		"command": `printf 'Password: '; IFS= read -r pw; echo "read ${#pw} characters"; sleep 600`})
	id, _ := job["process_id"].(string)
	// claude.ai declares no elicitation: the link comes back as a result.
	out, text := callOK(t, ctx, s, "process.input", map[string]any{"process_id": id, "secret_prompt": "Password for the job:"})
	si, _ := out["secret_input"].(map[string]any)
	link, _ := si["url"].(string)
	if si["state"] != "waiting_for_person" || !strings.HasPrefix(link, p.panel+"secret/") || !strings.Contains(text, link) {
		t.Fatalf("secret_prompt without elicitation: %v\n%s", out, text)
	}
	p.b.open(link)
	p.b.fill("#secret", "hunter2-e2e")
	p.b.submit("#send-secret")
	page, _ := callOK(t, ctx, s, "process.output", map[string]any{"process_id": id, "stdout_offset": si["stdout_offset"],
		"stderr_offset": si["stderr_offset"], "wait_ms": 30000, "min_bytes": 10})
	if data, _ := page["stdout"].(map[string]any)["data"].(string); !strings.Contains(data, "read 11 characters") || strings.Contains(data, "hunter2") {
		t.Fatalf("the job's output after the person typed: %q", data)
	}
	// A wait longer than the relay's call wait (3 s here) returns at it.
	start := time.Now()
	wait, text := callOK(t, ctx, s, "process.wait", map[string]any{"process_ids": []string{id}, "timeout_ms": 600000})
	if took := time.Since(start); took > time.Minute || wait["met"] != "timeout" || wait["call_again"] != true || !strings.Contains(text, "call again") {
		t.Fatalf("a ten-minute wait through a relay that waits 3 s: after %v %v %q", took, wait, text)
	}
	callOK(t, ctx, s, "process.stop", map[string]any{"process_id": id})
	// Outside the grant: the tool exists, and this connection may not use it.
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "files.write", Arguments: map[string]any{"path": "/tmp/x", "content": "x"}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "files.write is a tool of this relay, but this client's grant does not include it") {
		t.Errorf("files.write outside the grant: %v %+v", err, res)
	}
}

// TestChatGPTConnector runs ChatGPT's connector as OpenAI's documentation
// describes it (developers.openai.com, "Authentication" for apps and
// plugins): it prefers a client ID metadata document when the server
// offers them, follows the metadata's endpoints, passes resource unchanged
// through the whole flow, and is sent back to its per-connector callback
// https://chatgpt.com/connector/oauth/<id> (makeplane/plane-mcp-server
// #165). Here it connects to /mcp, where the person chooses devices.
func TestChatGPTConnector(t *testing.T) {
	p, site := startChatRelay(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	callbacks := p.b.answerFor("https://chatgpt.com/")
	typed := p.url + "/mcp"
	c := newChatClient(t, p, typed, false)
	c.redirectURI = "https://chatgpt.com/connector/oauth/c-4f0e2b7d"
	c.discover()
	if !c.meta.CIMD || c.meta.AuthorizationEndpoint != p.url+"/authorize" || c.meta.TokenEndpoint != p.url+"/token" {
		t.Fatalf("the authorization server's metadata: %+v", c.meta)
	}
	c.clientID = site.publish("/chatgpt/client-metadata.json", map[string]any{"client_name": "ChatGPT",
		"redirect_uris": []string{c.redirectURI}, "grant_types": []string{"authorization_code", "refresh_token"}, "token_endpoint_auth_method": "none"})
	back := c.consent(c.authorizeURL(c.challengeScope, typed, "gpt-state"), callbacks, func() {
		if got := p.b.text("#client"); got != "ChatGPT" {
			t.Errorf("the consent page names the client %q", got)
		}
		tickPresets(p.b, "read")
	})
	access, _ := c.redeem(back.Get("code"), typed)
	s := c.session(ctx, typed, access, "2025-06-18")
	devs, _ := callOK(t, ctx, s, "devices.list", map[string]any{})
	if list, _ := devs["devices"].([]any); len(list) != 1 {
		t.Fatalf("devices.list: %v", devs)
	}
	callOK(t, ctx, s, "process.jobs", map[string]any{"device": "dev1"})
}

// TestClaudeCodeSequence runs Claude Code's documented sequence (its HTTP
// MCP servers: OAuth discovered from the 401, dynamic registration at the
// metadata's endpoint with a loopback callback, the scope the 401 names,
// offline_access among them, as the MCP SDK's clients take it), and its
// other way in: a static token with --header stays connected while the
// relay offers OAuth. `make claude-code-test` drives the real binary's
// `claude mcp list` against the same relay set-up.
func TestClaudeCodeSequence(t *testing.T) {
	p, _ := startChatRelay(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	typed := p.url + "/mcp/dev1"
	site := newOAuthClientSite(t)
	callbacks := make(chan string, 4)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
				site.mu.Lock()
				for _, a := range site.answers {
					callbacks <- site.url + "/callback?" + a.Encode()
				}
				site.answers = nil
				site.mu.Unlock()
			}
		}
	}()
	c := newChatClient(t, p, typed, false)
	c.redirectURI = site.url + "/callback"
	c.discover()
	c.register(map[string]any{"client_name": "Claude Code (dev1)", "redirect_uris": []string{c.redirectURI},
		"grant_types": []string{"authorization_code", "refresh_token"}, "token_endpoint_auth_method": "none", "scope": c.challengeScope})
	back := c.consent(c.authorizeURL(c.challengeScope, typed, "cc-state"), callbacks, func() { tickPresets(p.b, "run") })
	access, _ := c.redeem(back.Get("code"), typed)
	callOK(t, ctx, c.session(ctx, typed, access, ""), "process.jobs", map[string]any{})

	static := p.relayCmd("token", "create", "--name", "claude-code", "--devices", "dev1", "--tools", "process.*")
	callOK(t, ctx, c.session(ctx, typed, static, ""), "process.jobs", map[string]any{})
}
