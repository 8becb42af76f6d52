package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// consentInBrowser is the go-sdk's authorization step done as a person
// would: the authorization URL opened in Chromium, signed out, so the
// panel asks for a sign-in code and comes back to its consent page, where
// choose narrows what the page offers before Allow; the browser's
// redirect to the client's loopback callback hands over the code. It
// allows one consent: a client sent to sign in again is refused.
type consentInBrowser struct {
	p      *panelEnv
	choose func()
	// signIn signs the person in from the panel's sign-in page; by
	// default with a code from relay admin create.
	signIn   func()
	codes    chan url.Values
	callback string
	used     bool
}

func newConsentInBrowser(t *testing.T, p *panelEnv, choose func()) *consentInBrowser {
	c := &consentInBrowser{p: p, choose: choose, codes: make(chan url.Values, 1)}
	c.signIn = c.signInWithCode
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		select {
		case c.codes <- r.URL.Query():
		default:
		}
		fmt.Fprintln(w, "You may close this page.")
	}))
	t.Cleanup(srv.Close)
	c.callback = srv.URL + "/callback"
	return c
}

var errNoMoreConsent = errors.New("the test allows one consent per client")

func (c *consentInBrowser) fetch(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
	if c.used {
		return nil, errNoMoreConsent
	}
	c.used = true
	p, b := c.p, c.p.b
	// Signed out: the consent page sends the browser to sign in first.
	b.open(args.URL)
	if path := eval[string](b, "location.pathname"); path != "/panel/login" {
		p.t.Fatalf("the authorization URL led a signed-out browser to %s, not the sign-in page", path)
	}
	c.signIn()
	// Back from another site (the provider), the panel reloads the page
	// once from its own origin, so its cookie comes along.
	b.await("signed in, the browser is back at the consent page", `location.pathname.startsWith('/panel/consent/') && !!document.querySelector('#allow')`, 10*time.Second)
	c.choose()
	b.submit("#allow")
	select {
	case q := <-c.codes:
		return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		return nil, errors.New("the browser never reached the callback")
	}
}

// signInWithCode signs alice in with a code from relay admin create.
func (c *consentInBrowser) signInWithCode() {
	link, err := url.Parse(c.p.relayCmd("admin", "create", "alice"))
	if err != nil {
		c.p.t.Fatal(err)
	}
	eval[bool](c.p.b, fmt.Sprintf("document.querySelector('#code').value = %q, true", link.Query().Get("code")))
	c.p.b.submit("#signin")
}

// connect is the Go SDK's OAuth client named client, registered
// dynamically, connected to endpoint from nothing: the person's part is
// c's.
func (c *consentInBrowser) connect(ctx context.Context, endpoint, client string) *mcp.ClientSession {
	c.p.t.Helper()
	handler, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{c.callback}, ClientName: client, GrantTypes: []string{"authorization_code", "refresh_token"}}},
		RedirectURL: c.callback, AuthorizationCodeFetcher: c.fetch,
	})
	if err != nil {
		c.p.t.Fatal(err)
	}
	session, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: endpoint, OAuthHandler: handler}, nil)
	if err != nil {
		c.p.t.Fatalf("connect through OAuth: %v", err)
	}
	c.p.t.Cleanup(func() { session.Close() })
	return session
}

// oauthConnection is a `relay token list --json` line of kind oauth.
type oauthConnection struct {
	ID, Kind, Client, Principal string
	Devices, Tools              []string
}

// oauthConnections are the OAuth connections `relay token list --json`
// lists.
func oauthConnections(t *testing.T, e *relayEnv) []oauthConnection {
	t.Helper()
	var conns []oauthConnection
	for _, line := range strings.Split(e.relayCmd("token", "list", "--json"), "\n") {
		var c oauthConnection
		if json.Unmarshal([]byte(line), &c) == nil && c.Kind == "oauth" {
			conns = append(conns, c)
		}
	}
	return conns
}

// TestOAuthClientConnectsThroughThePanel: the official Go SDK's OAuth
// client, given nothing but a device's MCP URL of the real relay, meets the
// 401, discovers the relay's metadata, registers dynamically and sends a
// person to the authorization URL; in Chromium the person signs in,
// narrows the connection to two read tools on that one device and allows
// it. The client then lists the real agent's jobs and is refused
// process.start; the connection is listed by `relay token list` with its
// client, principal, device and tools, and `relay token revoke` ends it:
// the next call fails, its token refused.
func TestOAuthClientConnectsThroughThePanel(t *testing.T) {
	p := startPanel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	endpoint := p.url + "/mcp/dev1"
	resp, err := http.Post(endpoint, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := `Bearer resource_metadata="` + p.url + `/.well-known/oauth-protected-resource/mcp/dev1", scope="read run write all offline_access"`; resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != want {
		t.Fatalf("without a token: %d %q, want 401 %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), want)
	}

	consent := newConsentInBrowser(t, p, func() {
		if got := p.b.text("#one-device"); !strings.Contains(got, "dev1") {
			t.Errorf("the consent page for /mcp/dev1 says %q of its devices", got)
		}
		if got := p.b.text("#client"); got != "e2e OAuth client" {
			t.Errorf("the consent page names the client %q", got)
		}
		eval[bool](p.b, `document.querySelectorAll('input[name=preset]').forEach(i => i.checked = false),
			document.querySelectorAll('input[name=tool]').forEach(i => i.checked = ['process.jobs', 'process.status'].includes(i.value)), true`)
	})
	session := consent.connect(ctx, endpoint, "e2e OAuth client")
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "process.jobs", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("process.jobs through the connection: %v %+v", err, res)
	}
	var jobs struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if data, _ := json.Marshal(res.StructuredContent); json.Unmarshal(data, &jobs) != nil || jobs.Jobs == nil {
		t.Fatalf("process.jobs answered %s, not the agent's job list", data)
	}
	res, err = session.CallTool(ctx, &mcp.CallToolParams{Name: "process.start", Arguments: map[string]any{"command": "true"}})
	if err == nil && !res.IsError {
		t.Fatal("a connection allowed process.jobs and process.status started a job")
	}

	var conn *oauthConnection
	for _, c := range oauthConnections(t, p.relayEnv) {
		conn = &c
	}
	if conn == nil || conn.Client != "e2e OAuth client" || conn.Principal != "alice" ||
		strings.Join(conn.Devices, ",") != p.device || strings.Join(conn.Tools, ",") != "process.jobs,process.status" {
		t.Fatalf("relay token list: %+v, want the connection alice allowed", conn)
	}
	p.relayCmd("token", "revoke", conn.ID)
	_, err = session.CallTool(ctx, &mcp.CallToolParams{Name: "process.jobs", Arguments: map[string]any{}})
	if !errors.Is(err, errNoMoreConsent) {
		t.Fatalf("a call after relay token revoke: %v, want the client sent to sign in again", err)
	}
}
