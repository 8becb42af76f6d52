package panel

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// secrets keeps what the panel hands over and answers as a test says.
type secrets struct {
	mu     sync.Mutex
	inputs []string
	err    error
}

func (s *secrets) SubmitSecret(_ context.Context, id string, input []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	s.inputs = append(s.inputs, id+" "+string(input))
	return len(input), nil
}

func (s *secrets) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.inputs...)
}

func newSecretFixture(t *testing.T) (*fixture, *secrets) {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fixture{t: t, state: st, devices: &devices{}}
	sec := &secrets{}
	p, err := New(Config{State: st, Devices: f.devices, Secrets: sec,
		Audit: func(e store.AuditEntry) { f.mu.Lock(); f.audited = append(f.audited, e); f.mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(p.Handler())
	t.Cleanup(f.srv.Close)
	return f, sec
}

func (f *fixture) prompt(job string) string {
	f.t.Helper()
	id, err := f.state.CreateSecretPrompt(store.SecretPrompt{TokenID: "tok_1", Principal: "alice", Device: "dev_x", ProcessID: job, Prompt: "Key <passphrase>:"}, time.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

// TestSecretPageSendsTheInputOnce: the page shows who asked, for which
// job, and the prompt (escaped); the input goes to Secrets with Enter
// unless unticked; the answer page and the audit never carry it.
func TestSecretPageSendsTheInputOnce(t *testing.T) {
	f, sec := newSecretFixture(t)
	c := f.signIn("olga")
	for _, tc := range []struct {
		enter bool
		want  string
	}{{true, "hunter2\n"}, {false, "hunter2"}} {
		id := f.prompt("job-1")
		resp, page := f.do(c, "GET", SecretPath+id, nil, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Key &lt;passphrase&gt;:") || !strings.Contains(page, "alice") ||
			!strings.Contains(page, "job-1") || !strings.Contains(page, `type="password"`) {
			t.Fatalf("prompt page %d:\n%s", resp.StatusCode, page)
		}
		form := url.Values{"csrf": {f.csrf(c)}, "secret": {"hunter2"}}
		if tc.enter {
			form.Set("enter", "1")
		}
		resp, page = f.do(c, "POST", SecretPath+id, form, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(page, "the job took "+strconv.Itoa(len(tc.want))+" bytes") || strings.Contains(page, "hunter2") {
			t.Fatalf("answer %d:\n%s", resp.StatusCode, page)
		}
		if got := sec.got(); got[len(got)-1] != id+" "+tc.want {
			t.Fatalf("handed over %q, want %q", got[len(got)-1], tc.want)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int
	for _, e := range f.audited {
		if strings.Contains(e.Tool+e.Device+e.Code+e.Principal, "hunter2") {
			t.Errorf("audit entry carries the input: %+v", e)
		}
		if e.Tool == "panel.secret_input" && e.Principal == "admin:olga" && e.Device == "dev_x" && e.Outcome == store.AuditOK {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d panel.secret_input entries, want 2: %+v", n, f.audited)
	}
}

// TestSecretPageRefusals: an unknown or answered prompt, a failed
// hand-over (said with its code), a relay without secret input, and a
// missing CSRF token.
func TestSecretPageRefusals(t *testing.T) {
	f, sec := newSecretFixture(t)
	c := f.signIn("olga")
	csrf := f.csrf(c)
	if resp, page := f.do(c, "GET", SecretPath+"ccp_"+strings.Repeat("A", 43), nil, nil); resp.StatusCode != http.StatusNotFound || !strings.Contains(page, "unknown, used or expired") {
		t.Errorf("unknown prompt: %d\n%s", resp.StatusCode, page)
	}
	id := f.prompt("job-2")
	if resp, _ := f.do(c, "POST", SecretPath+id, url.Values{"secret": {"x"}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("no CSRF token: %d", resp.StatusCode)
	}
	sec.err = errcode.New(errcode.NotRunning, "the job has ended")
	resp, page := f.do(c, "POST", SecretPath+id, url.Values{"csrf": {csrf}, "secret": {"x"}}, nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(page, "the job has ended (not_running)") {
		t.Errorf("failed hand-over: %d\n%s", resp.StatusCode, page)
	}
	sec.err = errcode.New(errcode.NotFound, "used")
	if resp, _ := f.do(c, "POST", SecretPath+id, url.Values{"csrf": {csrf}, "secret": {"x"}}, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a prompt taken meanwhile: %d", resp.StatusCode)
	}
	if _, err := f.state.TakeSecretPrompt(id, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, page := f.do(c, "GET", SecretPath+id, nil, nil); !strings.Contains(page, "already answered") || strings.Contains(page, `type="password"`) {
		t.Errorf("a taken prompt's page:\n%s", page)
	}
	if len(sec.got()) != 0 {
		t.Errorf("handed over %q", sec.got())
	}

	plain := newFixture(t, false)
	pc := plain.signIn("olga")
	pid, _ := plain.state.CreateSecretPrompt(store.SecretPrompt{ProcessID: "j", Prompt: "p"}, time.Now())
	if resp, page := plain.do(pc, "POST", SecretPath+pid, url.Values{"csrf": {plain.csrf(pc)}, "secret": {"x"}}, nil); resp.StatusCode != http.StatusNotFound || !strings.Contains(page, "takes no secret input") {
		t.Errorf("no Secrets: %d\n%s", resp.StatusCode, page)
	}
}

// TestSignInReturnsToTheSecretPage: a person sent to a prompt's page
// before signing in comes back to it after; any other destination is the
// Overview, so a link cannot send a new session elsewhere.
func TestSignInReturnsToTheSecretPage(t *testing.T) {
	f, _ := newSecretFixture(t)
	id := f.prompt("job-3")
	c := f.client()
	resp, _ := f.do(c, "GET", SecretPath+id, nil, nil)
	want := LoginPath + "?next=" + url.QueryEscape(SecretPath+id)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
		t.Fatalf("signed out: %d to %q, want %q", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	_, page := f.do(c, "GET", want, nil, nil)
	if !strings.Contains(page, `name="next" value="`+SecretPath+id+`"`) {
		t.Fatalf("the sign-in page does not carry next:\n%s", page)
	}
	resp, _ = f.do(c, "POST", LoginPath, url.Values{"code": {f.code("olga")}, "next": {SecretPath + id}}, nil)
	if resp.Header.Get("Location") != SecretPath+id {
		t.Fatalf("after sign-in: to %q, want the prompt's page", resp.Header.Get("Location"))
	}
	for _, next := range []string{"//evil.example/x", "https://evil.example/", Prefix + "tokens", SecretPath, SecretPath + "a/../../x", SecretPath + "a?b", SecretPath + `a\b`, SecretPath + "a%2fb"} {
		resp, _ := f.do(f.client(), "POST", LoginPath, url.Values{"code": {f.code("olga")}, "next": {next}}, nil)
		if resp.Header.Get("Location") != Prefix {
			t.Errorf("next %q: to %q, want %q", next, resp.Header.Get("Location"), Prefix)
		}
	}
	if resp, _ := f.do(f.client(), "GET", Prefix+"tokens", nil, nil); resp.Header.Get("Location") != LoginPath {
		t.Errorf("another page signed out: to %q, want plain %q", resp.Header.Get("Location"), LoginPath)
	}
}

// TestSecretPageShowsWhatIsAsking: the page shows the job's name, its
// owner and what it last printed, read as the admin, as text: markup is
// escaped and a character that does not read as itself (a terminal's
// escape, a bidi override) is replaced; for a job on a terminal, its
// screen; a device that refuses says why instead.
func TestSecretPageShowsWhatIsAsking(t *testing.T) {
	f, _ := newSecretFixture(t)
	c := f.signIn("olga")
	var asked []string
	f.devices.fn = func(tool string, args json.RawMessage) (json.RawMessage, error) {
		asked = append(asked, tool+" "+string(args))
		switch tool {
		case "process.status":
			return json.RawMessage(`{"process_id":"job-1","name":"deploy <db>","owner":"alice","state":"running"}`), nil
		case "process.output":
			return json.RawMessage(`{"state":"running","stdout":{"data":"connecting\nEnter \u202e<b>pass</b>\u001b[0m:\n","encoding":"utf-8","offset":0,"next_offset":36},
				"stderr":{"data":"d2FybgnDvw==","encoding":"base64","offset":0,"next_offset":8}}`), nil
		}
		return nil, errcode.New(errcode.PermissionDenied, "no")
	}
	_, page := f.do(c, "GET", SecretPath+f.prompt("job-1"), nil, nil)
	for _, want := range []string{`<dd id="job-name">deploy &lt;db&gt;</dd>`, `<dd id="job-owner"><span title="principal alice">alice</span></dd>`,
		"connecting\nEnter \uFFFD&lt;b&gt;pass&lt;/b&gt;\uFFFD[0m:\nwarn\tÿ</pre>", "What the job last printed</h2>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the secret page lacks %q:\n%s", want, page)
		}
	}
	if strings.Join(asked, "|") != `process.status {"process_id":"job-1"}|process.output {"max_bytes":65536,"process_id":"job-1"}` {
		t.Errorf("the page asked the device %q", asked)
	}
	f.devices.mu.Lock()
	if !strings.HasPrefix(f.devices.calls[0], "olga dev_x ") {
		t.Errorf("the page read the job as %q, want the admin on the prompt's device", f.devices.calls[0])
	}
	f.devices.mu.Unlock()

	f.devices.fn = func(tool string, _ json.RawMessage) (json.RawMessage, error) {
		switch tool {
		case "process.status":
			return json.RawMessage(`{"process_id":"job-1","name":"sudo","owner":"alice","state":"running","pty":{"cols":80,"rows":24}}`), nil
		case "process.screen":
			return json.RawMessage(`{"lines":["$ sudo true","[sudo] password for alice: ",""]}`), nil
		}
		return nil, errcode.New(errcode.PermissionDenied, "no")
	}
	_, page = f.do(c, "GET", SecretPath+f.prompt("job-1"), nil, nil)
	if !strings.Contains(page, "(its screen)</h2>") || !strings.Contains(page, ">$ sudo true\n[sudo] password for alice: </pre>") {
		t.Errorf("a terminal job's secret page:\n%s", page)
	}

	f.devices.fn = func(string, json.RawMessage) (json.RawMessage, error) {
		return nil, errcode.New(errcode.AdminRefused, "this device does not allow admin views")
	}
	_, page = f.do(c, "GET", SecretPath+f.prompt("job-1"), nil, nil)
	if !strings.Contains(page, `id="printed-unread">It cannot be shown: This device does not allow admin views`) || strings.Contains(page, `id="printed"`) ||
		!strings.Contains(page, `type="password"`) {
		t.Errorf("a refusing device's secret page:\n%s", page)
	}
}

// TestSecretInputIsOneLine: input holding a newline, a carriage return or
// another control character is refused with a page that says so; nothing
// reaches the job and the prompt still waits for a line that does.
func TestSecretInputIsOneLine(t *testing.T) {
	f, sec := newSecretFixture(t)
	c := f.signIn("olga")
	id := f.prompt("job-1")
	for _, bad := range []string{"hunter2\n", "a\rb", "\x03", "pass\tword", "x\x7f", "\u0085"} {
		resp, page := f.do(c, "POST", SecretPath+id, url.Values{"csrf": {f.csrf(c)}, "secret": {bad}, "enter": {"1"}}, nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "Nothing was sent: the input is one line") ||
			!strings.Contains(page, `type="password"`) {
			t.Errorf("input %q: %d\n%s", bad, resp.StatusCode, page)
		}
	}
	if got := sec.got(); len(got) != 0 {
		t.Fatalf("handed over %q", got)
	}
	resp, _ := f.do(c, "POST", SecretPath+id, url.Values{"csrf": {f.csrf(c)}, "secret": {"pass word ☕"}, "enter": {"1"}}, nil)
	if got := sec.got(); resp.StatusCode != http.StatusOK || len(got) != 1 || got[0] != id+" pass word ☕\n" {
		t.Fatalf("one line: %d, handed over %q", resp.StatusCode, got)
	}
}
