package relay

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
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

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/panel"
	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/toolresult"
)

// secretMarker is the secret the tests type: it must appear in the job's
// input and nowhere else.
const secretMarker = "SECRET-5e1f0b7d"

// inputDevice serves process.input, keeping what it was sent, and
// answering with the byte count as the agent does.
type inputDevice struct {
	mu  sync.Mutex
	got []map[string]any
}

func (d *inputDevice) server() *mcp.Server {
	srv := fakeDevice()
	srv.AddTool(&mcp.Tool{Name: "process.input", InputSchema: map[string]any{"type": "object"}}, func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args map[string]any
		json.Unmarshal(r.Params.Arguments, &args)
		if args["process_id"] == "not-interactive" {
			return toolresult.Failure(errcode.New(errcode.NotInteractive, "the job was started without stdin or a terminal")), nil
		}
		d.mu.Lock()
		d.got = append(d.got, args)
		d.mu.Unlock()
		data, _ := base64.StdEncoding.DecodeString(args["data"].(string))
		return toolresult.Success(map[string]any{"process_id": args["process_id"], "accepted_bytes": len(data),
			"stdout_offset": 3, "stderr_offset": 0, "input_closed": false}), nil
	})
	return srv
}

// inputs are the calls that wrote bytes: a call of no bytes, which asks
// where the output stands, is none.
func (d *inputDevice) inputs() []map[string]any {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []map[string]any
	for _, a := range d.got {
		if a["data"] != "" {
			out = append(out, a)
		}
	}
	return out
}

// secretHarness is a relay with its panel, a device serving process.input,
// and a signed-in admin.
type secretHarness struct {
	*harness
	dev     *inputDevice
	panel   *httptest.Server
	session string
	logged  *bytes.Buffer
	logMu   *sync.Mutex
}

func newSecretHarness(t *testing.T) *secretHarness {
	t.Helper()
	var logged bytes.Buffer
	var logMu sync.Mutex
	h := newHarness(t, func(s *Server) { s.Log = log.New(lockedWriter{&logMu, &logged}, "", 0) })
	ps, err := h.srv.PanelServer(false)
	if err != nil {
		t.Fatal(err)
	}
	hp := httptest.NewUnstartedServer(nil)
	hp.Config = ps
	hp.Start()
	t.Cleanup(hp.Close)
	h.srv.replica.Panel = hp.URL
	d := &inputDevice{}
	h.link(t, d.server())
	code, err := h.st.CreateSignIn("olga", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, session, err := h.st.SignIn(code, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &secretHarness{harness: h, dev: d, panel: hp, session: session, logged: &logged, logMu: &logMu}
}

// client connects an MCP client with a token of its own; urlElicit
// declares URL elicitation and answers every elicitation with action,
// sending its URL to urls first.
func (h *secretHarness) client(t *testing.T, version string, urlElicit bool, action string, urls chan<- string) (*mcp.ClientSession, *store.Token) {
	t.Helper()
	tok, bearer, err := h.st.CreateToken(store.TokenSpec{Name: "c", Principal: "alice", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	opts := &mcp.ClientOptions{}
	if urlElicit {
		opts.Capabilities = &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}}
		opts.ElicitationHandler = func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if r.Params.Mode != "url" || r.Params.URL == "" || r.Params.ElicitationID == "" {
				t.Errorf("elicitation %+v, want mode url with a URL and an ID", r.Params)
			}
			urls <- r.Params.URL
			return &mcp.ElicitResult{Action: action}, nil
		}
	}
	s, err := mcp.NewClient(&mcp.Implementation{Name: "secret-test", Version: "1"}, opts).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: h.hs.URL + "/mcp/dev", HTTPClient: relaytest.HTTPClient(bearer)},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, tok
}

// page fetches a panel page as the signed-in admin (or, with no session,
// as nobody) and returns its status and body.
func (h *secretHarness) page(t *testing.T, method, path, session string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, h.panel.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", h.panel.URL)
	}
	if session != "" {
		req.AddCookie(&http.Cookie{Name: panel.CookieName, Value: session})
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// typeSecret opens the prompt's page and sends the secret with Enter.
func (h *secretHarness) typeSecret(t *testing.T, promptURL, secret string) string {
	t.Helper()
	u, err := url.Parse(promptURL)
	if err != nil || !strings.HasPrefix(promptURL, h.panel.URL+panel.SecretPath) {
		t.Fatalf("prompt URL %q is not on the panel %s", promptURL, h.panel.URL)
	}
	status, page := h.page(t, "GET", u.Path, h.session, nil)
	m := csrfInput.FindStringSubmatch(page)
	if status != http.StatusOK || m == nil || !strings.Contains(page, "Password for the job:") || !strings.Contains(page, `type="password"`) {
		t.Fatalf("prompt page: %d\n%s", status, page)
	}
	status, page = h.page(t, "POST", u.Path, h.session, url.Values{"csrf": {m[1]}, "secret": {secret}, "enter": {"1"}})
	if status != http.StatusOK {
		t.Fatalf("sending the secret: %d\n%s", status, page)
	}
	return page
}

func secretArgsFor(job string) map[string]any {
	return map[string]any{"process_id": job, "secret_prompt": "Password for the job:"}
}

// callInput calls process.input with args and reads its answer.
func callInput(t *testing.T, c *mcp.ClientSession, args map[string]any) (map[string]any, *errcode.Error) {
	t.Helper()
	res, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.input", Arguments: args})
	return callResult(t, res, err)
}

// callResult is a finished call's structured content, or its error.
func callResult(t *testing.T, res *mcp.CallToolResult, err error) (map[string]any, *errcode.Error) {
	t.Helper()
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out map[string]any
	json.Unmarshal(raw, &out)
	if res.IsError {
		e, _ := out["error"].(map[string]any)
		code, _ := e["code"].(string)
		msg, _ := e["message"].(string)
		return nil, errcode.New(errcode.Code(code), "%s", msg)
	}
	return out, nil
}

// TestSecretInputThroughURLElicitation: a client that offers URL
// elicitation is sent to the prompt's panel page; the person types the
// secret there; it reaches the job once, with Enter; the client's result
// is the job's byte count; the secret is in no result, log, audit row or
// state file, and the page takes no second input.
func TestSecretInputThroughURLElicitation(t *testing.T) {
	h := newSecretHarness(t)
	urls := make(chan string, 1)
	c, _ := h.client(t, "", true, "accept", urls)
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.input", Arguments: secretArgsFor("job-1")})
		done <- answer{res, err}
	}()
	var promptURL string
	select {
	case promptURL = <-urls:
	case a := <-done:
		t.Fatalf("the call ended before any elicitation: %+v, %v", a.res, a.err)
	case <-time.After(20 * time.Second):
		t.Fatal("no elicitation reached the client")
	}
	select {
	case a := <-done:
		t.Fatalf("the call ended before the person typed: %+v, %v", a.res, a.err)
	case <-time.After(600 * time.Millisecond):
	}
	page := h.typeSecret(t, promptURL, secretMarker)
	if !strings.Contains(page, "the job took 16 bytes") || strings.Contains(page, secretMarker) {
		t.Fatalf("answer page:\n%s", page)
	}
	var a answer
	select {
	case a = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not end once the secret was typed")
	}
	out, failed := callResult(t, a.res, a.err)
	if failed != nil || out["accepted_bytes"] != float64(len(secretMarker)+1) || out["process_id"] != "job-1" {
		t.Fatalf("result %v, %v; want accepted_bytes %d", out, failed, len(secretMarker)+1)
	}
	got := h.dev.inputs()
	if len(got) != 1 || got[0]["process_id"] != "job-1" || got[0]["encoding"] != "base64" ||
		got[0]["data"] != base64.StdEncoding.EncodeToString([]byte(secretMarker+"\n")) || got[0]["secret"] != true || len(got[0]) != 4 {
		t.Fatalf("the device got %v, want the secret and Enter once, base64, marked secret", got)
	}
	raw, _ := json.Marshal(a.res)
	if strings.Contains(string(raw), secretMarker) {
		t.Fatalf("the result carries the secret: %s", raw)
	}

	// The page is one-time: a second input is refused, and nothing more
	// reaches the job.
	u, _ := url.Parse(promptURL)
	_, again := h.page(t, "GET", u.Path, h.session, nil)
	if !strings.Contains(again, "already answered") || strings.Contains(again, `type="password"`) {
		t.Fatalf("the used page still takes input:\n%s", again)
	}
	m := csrfInput.FindStringSubmatch(again)
	if status, _ := h.page(t, "POST", u.Path, h.session, url.Values{"csrf": {m[1]}, "secret": {"again"}}); status != http.StatusNotFound {
		t.Errorf("a second POST: %d, want 404", status)
	}
	if n := len(h.dev.inputs()); n != 1 {
		t.Errorf("the device got %d inputs, want 1", n)
	}
	h.srv.Close()
	h.assertNoSecret(t)
}

// assertNoSecret checks the relay's log, audit and state files for the
// secret.
func (h *secretHarness) assertNoSecret(t *testing.T) {
	t.Helper()
	h.logMu.Lock()
	logged := h.logged.String()
	h.logMu.Unlock()
	if strings.Contains(logged, secretMarker) {
		t.Errorf("the relay's log carries the secret:\n%s", logged)
	}
	entries, err := h.st.Audit(100)
	if err != nil {
		t.Fatal(err)
	}
	var panelInput bool
	for _, e := range entries {
		raw, _ := json.Marshal(e)
		if strings.Contains(string(raw), secretMarker) {
			t.Errorf("audit entry carries the secret: %s", raw)
		}
		panelInput = panelInput || e.Tool == "panel.secret_input" && e.Principal == "admin:olga"
	}
	if !panelInput {
		t.Errorf("no panel.secret_input audit entry by admin:olga in %+v", entries)
	}
	files, _ := filepath.Glob(filepath.Join(h.stateDir, "*"))
	if len(files) == 0 {
		t.Fatal("no state files to check")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secretMarker)) {
			t.Errorf("state file %s carries the secret", filepath.Base(f))
		}
	}
}

// TestSecretInputWithoutURLElicitation: a client that offers no URL
// elicitation (claude.ai declares none: only the MCP Apps extension), and
// one that does on a protocol revision before the relay's input requests,
// get a successful result: the page's link as a field of its own, where
// the job's output stood, and a text telling the model to ask the person
// and how to learn that they typed. The person types it there; the input
// never passes through the client. A job that takes no input is said so
// before anyone is sent to a page.
func TestSecretInputWithoutURLElicitation(t *testing.T) {
	h := newSecretHarness(t)
	for _, tc := range []struct {
		name      string
		version   string
		urlElicit bool
	}{
		{"no URL elicitation", "2026-07-28", false},
		{"an older protocol", "2025-11-25", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := h.client(t, tc.version, tc.urlElicit, "accept", make(chan string, 1))
			start := time.Now()
			res, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.input", Arguments: secretArgsFor("job-2")})
			out, failed := callResult(t, res, err)
			if failed != nil {
				t.Fatalf("a client without URL elicitation: %v, want a successful result", failed)
			}
			si, _ := out["secret_input"].(map[string]any)
			promptURL, _ := si["url"].(string)
			expires, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(si["expires_at"]))
			if out["process_id"] != "job-2" || si["state"] != SecretWaiting || !regexp.MustCompile(`^http://\S+/panel/secret/ccp_[A-Za-z0-9_-]{43}$`).MatchString(promptURL) ||
				si["stdout_offset"] != 3.0 || si["stderr_offset"] != 0.0 || expires.Before(start.Add(limits.SecretPromptTTL-time.Minute)) || expires.After(time.Now().Add(limits.SecretPromptTTL)) {
				t.Fatalf("structured result: %v", out)
			}
			text := res.Content[0].(*mcp.TextContent).Text
			for _, want := range []string{"Ask them to open " + promptURL, "never passes through you", `process.output with process_id "job-2", stdout_offset 3, stderr_offset 0`,
				`from_offset {"stdout":3,"stderr":0}`} {
				if !strings.Contains(text, want) {
					t.Errorf("the text lacks %q:\n%s", want, text)
				}
			}
			before := len(h.dev.inputs())
			if page := h.typeSecret(t, promptURL, secretMarker); !strings.Contains(page, "the job took 16 bytes") {
				t.Fatalf("answer page:\n%s", page)
			}
			if n := len(h.dev.inputs()); n != before+1 {
				t.Fatalf("the device got %d new inputs, want 1", n-before)
			}
		})
	}
	c, _ := h.client(t, "", false, "", nil)
	if _, failed := callInput(t, c, secretArgsFor("not-interactive")); failed == nil || failed.Code != errcode.NotInteractive {
		t.Errorf("a job without input: %v, want not_interactive", failed)
	}
	h.assertNoSecret(t)
}

// TestSecretInputDeclined: a person who declines in the client ends the
// prompt: the call is refused, and the page takes no input.
func TestSecretInputDeclined(t *testing.T) {
	h := newSecretHarness(t)
	urls := make(chan string, 1)
	c, _ := h.client(t, "", true, "decline", urls)
	_, failed := callInput(t, c, secretArgsFor("job-3"))
	if failed == nil || failed.Code != errcode.PermissionDenied || !strings.Contains(failed.Message, "declined") {
		t.Fatalf("got %v, want permission_denied: declined", failed)
	}
	u, _ := url.Parse(<-urls)
	if _, page := h.page(t, "GET", u.Path, h.session, nil); strings.Contains(page, `type="password"`) {
		t.Fatalf("a declined prompt's page takes input:\n%s", page)
	}
	if n := len(h.dev.inputs()); n != 0 {
		t.Errorf("the device got %d inputs", n)
	}
}

// TestSecretInputTokenRevokedWhileTyping: the input of a prompt whose
// token was revoked before the person sent it does not reach the job; the
// waiting call gets the refusal.
func TestSecretInputTokenRevokedWhileTyping(t *testing.T) {
	h := newSecretHarness(t)
	urls := make(chan string, 1)
	c, tok := h.client(t, "", true, "accept", urls)
	done := make(chan *errcode.Error, 1)
	go func() {
		res, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.input", Arguments: secretArgsFor("job-4")})
		if err != nil {
			done <- errcode.New(errcode.Internal, "%v", err)
			return
		}
		_, failed := callResult(t, res, nil)
		done <- failed
	}()
	promptURL := <-urls
	// The retry carries the token: let it start waiting first.
	time.Sleep(300 * time.Millisecond)
	if err := h.st.RevokeToken(tok.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(promptURL)
	_, page := h.page(t, "GET", u.Path, h.session, nil)
	m := csrfInput.FindStringSubmatch(page)
	status, page := h.page(t, "POST", u.Path, h.session, url.Values{"csrf": {m[1]}, "secret": {secretMarker}})
	if status != http.StatusBadGateway || !strings.Contains(page, "revoked") {
		t.Fatalf("sending for a revoked token: %d\n%s", status, page)
	}
	if n := len(h.dev.inputs()); n != 0 {
		t.Fatalf("the device got %d inputs for a revoked token", n)
	}
	select {
	case failed := <-done:
		if failed == nil || failed.Code != errcode.PermissionDenied {
			t.Fatalf("the waiting call: %v, want permission_denied", failed)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting call did not end")
	}
}

// TestSecretInputBadRequests: secret_prompt with other input arguments, a
// bad prompt, and a request state that is not the call's are refused
// before anyone is asked; a relay without a panel cannot ask.
func TestSecretInputBadRequests(t *testing.T) {
	h := newSecretHarness(t)
	c, _ := h.client(t, "", true, "accept", make(chan string, 8))
	for name, args := range map[string]map[string]any{
		"data too":       {"process_id": "j", "secret_prompt": "p", "data": "x"},
		"wait_ms too":    {"process_id": "j", "secret_prompt": "p", "wait_ms": 100},
		"control prompt": {"process_id": "j", "secret_prompt": "a\x1bb"},
		"bidi prompt":    {"process_id": "j", "secret_prompt": "Password for \u202egnp.exe"},
		"isolate prompt": {"process_id": "j", "secret_prompt": "\u2067Password\u2069"},
		"zero width":     {"process_id": "j", "secret_prompt": "pass\u200bword"},
		"empty prompt":   {"process_id": "j", "secret_prompt": ""},
		"no job":         {"secret_prompt": "p"},
	} {
		_, failed := callInput(t, c, args)
		if failed == nil || failed.Code != errcode.InvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", name, failed)
		}
	}
	// A state the relay never handed out, sent as a retry would be.
	raw, _ := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.input", Arguments: secretArgsFor("j"),
		RequestState: "ccp_" + strings.Repeat("A", 43), InputResponses: mcp.InputResponseMap{secretRequestKey: &mcp.ElicitResult{Action: "accept"}}})
	if _, failed := callResult(t, raw, nil); failed == nil || failed.Code != errcode.NotFound {
		t.Errorf("an unknown request state: %v, want not_found", failed)
	}
	if n := len(h.dev.inputs()); n != 0 {
		t.Errorf("the device got %d inputs", n)
	}
	// A token with as many prompts waiting as it may have gets a clear
	// refusal for the next, and another token does not.
	many, _ := h.client(t, "", false, "accept", make(chan string, 1))
	for range limits.SecretPromptsPerToken {
		if _, failed := callInput(t, many, secretArgsFor("j")); failed != nil {
			t.Fatalf("a prompt within the bound: %v", failed)
		}
	}
	if _, failed := callInput(t, many, secretArgsFor("j")); failed == nil || failed.Code != errcode.RateLimited || !strings.Contains(failed.Message, "waiting for a person") {
		t.Errorf("one prompt past the bound: %v, want rate_limited", failed)
	}
	other, _ := h.client(t, "", false, "accept", make(chan string, 1))
	if _, failed := callInput(t, other, secretArgsFor("j")); failed != nil {
		t.Errorf("another token's prompt: %v", failed)
	}
	h.srv.replica.Panel = ""
	_, failed := callInput(t, c, secretArgsFor("j"))
	if failed == nil || failed.Code != errcode.ElicitationUnsupported || !strings.Contains(failed.Message, "--panel-listen") {
		t.Errorf("no panel: %v, want elicitation_unsupported naming --panel-listen", failed)
	}
}

// TestSecretPageNeedsSession: the prompt's page, and a POST to it, need a
// signed-in admin and the session's CSRF token; without a session the
// page leads to sign-in and back.
func TestSecretPageNeedsSession(t *testing.T) {
	h := newSecretHarness(t)
	c, _ := h.client(t, "", false, "", nil)
	out, failed := callInput(t, c, secretArgsFor("job-5"))
	si, _ := out["secret_input"].(map[string]any)
	u, err := url.Parse(fmt.Sprint(si["url"]))
	if err != nil || u.Path == "" {
		t.Fatalf("no URL in %v %v", out, failed)
	}
	status, _ := h.page(t, "GET", u.Path, "", nil)
	if status != http.StatusSeeOther {
		t.Errorf("no session: %d, want a redirect to sign-in", status)
	}
	if status, _ := h.page(t, "POST", u.Path, "", url.Values{"secret": {secretMarker}}); status != http.StatusForbidden {
		t.Errorf("POST without a session: %d", status)
	}
	if status, _ := h.page(t, "POST", u.Path, h.session, url.Values{"secret": {secretMarker}}); status != http.StatusForbidden {
		t.Errorf("POST without CSRF: %d", status)
	}
	if n := len(h.dev.inputs()); n != 0 {
		t.Errorf("the device got %d inputs", n)
	}
}

// TestAsksSecret: process.input's secret_prompt is seen however the key
// is written (an escaped key decodes to it on the device too), and only
// on process.input.
func TestAsksSecret(t *testing.T) {
	for args, want := range map[string]bool{
		`{"process_id":"j","secret_prompt":"p"}`:      true,
		`{"process_id":"j","secret\u005fprompt":"p"}`: true,
		`{"process_id":"j","secret_prompt":null}`:     true,
		`{"process_id":"j","data":"secret_prompt"}`:   false,
		`{"process_id":"j"}`:                          false,
		`{"secret_prompt":`:                           false,
		``:                                            false,
	} {
		if got := asksSecret("process.input", json.RawMessage(args)); got != want {
			t.Errorf("asksSecret(%s) = %v, want %v", args, got, want)
		}
	}
	if asksSecret("process.start", json.RawMessage(`{"secret_prompt":"p"}`)) {
		t.Error("secret_prompt seen on process.start")
	}
}
