package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// syncBuffer is a log several processes' pipes write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	os.Stderr.Write(p)
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// panelEnv is a relay serving its panel, an enrolled agent on the user
// manager, and a browser.
type panelEnv struct {
	*relayEnv
	panel    string // the panel's base URL, ending in /panel/
	relayLog *syncBuffer
	agentLog *syncBuffer
	b        *browser
	device   string // the device's ID
}

// startPanel starts a relay serving its panel (with relayArgs besides),
// links an agent named dev1 to it, and opens a browser on the panel.
func startPanel(t *testing.T, relayArgs ...string) *panelEnv {
	t.Helper()
	p := &panelEnv{relayLog: &syncBuffer{}, agentLog: &syncBuffer{}}
	e := &relayEnv{t: t, relayState: t.TempDir(), agentState: t.TempDir(), agentConfig: t.TempDir(), agentLog: p.agentLog}
	args := append([]string{"--listen", "127.0.0.1:0", "--state-dir", e.relayState, "--config-dir", t.TempDir()}, relayArgs...)
	cmd, base, panelURL, err := relaytest.ServePanelLogged(bin, p.relayLog, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	e.relay, e.url = cmd, base
	p.relayEnv, p.panel = e, panelURL
	e.online()
	var devs []struct{ ID, Name string }
	for _, line := range strings.Split(e.relayCmd("devices", "--json"), "\n") {
		var d struct{ ID, Name string }
		if json.Unmarshal([]byte(line), &d) == nil && d.Name == "dev1" {
			devs = append(devs, d)
		}
	}
	if len(devs) != 1 {
		t.Fatalf("relay devices --json: %v", devs)
	}
	p.device = devs[0].ID
	p.b = newBrowser(t, strings.TrimSuffix(panelURL, "panel/"))
	return p
}

// signIn opens a fresh sign-in URL from `relay admin create` and signs
// in, and returns the URL.
func (p *panelEnv) signIn(admin string) string {
	p.t.Helper()
	link := p.relayCmd("admin", "create", admin)
	if !strings.HasPrefix(link, strings.TrimSuffix(p.panel, "/panel/")+"/panel/login?code=ccA-") {
		p.t.Fatalf("admin create printed %q, not a sign-in URL on %s", link, p.panel)
	}
	if status := p.b.open(link); status != http.StatusOK {
		p.t.Fatalf("sign-in page: %d", status)
	}
	if status := p.b.submit("#signin"); status != http.StatusOK {
		p.t.Fatalf("sign-in: %d", status)
	}
	if path := eval[string](p.b, "location.pathname"); path != "/panel/" {
		p.t.Fatalf("after sign-in at %s, want the Overview", path)
	}
	return link
}

// deviceLink is what the Overview's row of the device says of its link.
func (p *panelEnv) deviceLink() string {
	return fmt.Sprintf(`(document.querySelector('tr[data-device=%q] [data-field="link"]') || {}).textContent`, p.device)
}

// TestPanelInABrowser drives the web panel in headless Chromium against
// the real relay and a real agent on the user manager: sign-in once, the
// live Overview across an agent restart, a client's job with its live
// tail and Stop, a token created, used and revoked, the CSRF and origin
// checks, and no CSP violation on any page; it writes a screenshot of
// every page.
func TestPanelInABrowser(t *testing.T) {
	p := startPanel(t)
	b := p.b

	// Sign in through the printed URL; the URL works once.
	link := p.relayCmd("admin", "create", "olga")
	if status := b.open(link); status != http.StatusOK {
		t.Fatalf("sign-in page: %d", status)
	}
	b.shot("login")
	if status := b.submit("#signin"); eval[string](b, "location.pathname") != "/panel/" {
		t.Fatalf("sign-in did not lead to the Overview: %d at %s: %s", status, eval[string](b, "location.href"), b.text("main"))
	}
	b.submit(".signout button")
	b.open(link)
	if status := b.submit("#signin"); status != http.StatusForbidden || !strings.Contains(b.text("main"), "invalid, used or expired") {
		t.Fatalf("a second use of the sign-in URL: %d %q", status, b.text("main"))
	}
	p.signIn("olga")

	t.Run("overview follows the agent", func(t *testing.T) {
		b := b.with(t)
		b.await("the Overview shows the device connected", p.deviceLink()+` === "connected"`, 10*time.Second)
		b.shot("overview")
		eval[bool](b, "window.stillThisPage = true")
		p.agent.Process.Signal(syscall.SIGTERM)
		p.agent.Wait()
		b.await("the Overview shows the device offline", p.deviceLink()+` === "offline"`, limits.SilenceTimeout+5*time.Second)
		if !strings.HasPrefix(b.text("#connected-count"), "0") {
			t.Errorf("connected count %q with the agent stopped", b.text("#connected-count"))
		}
		p.startAgent()
		b.await("the Overview shows the device connected again", p.deviceLink()+` === "connected"`, 30*time.Second)
		if !eval[bool](b, "window.stillThisPage === true") {
			t.Error("the page was reloaded")
		}
		b.open(p.panel + "devices")
		b.shot("devices")
	})

	c, err := p.connect("/mcp/dev1", p.token, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitOnline(t, c, nil)

	var job string
	t.Run("a client's job, its tail and Stop", func(t *testing.T) {
		b := b.with(t)
		job = c.start(map[string]any{"command": "for i in $(seq 1 600); do echo tail-line-$i; if [ $((i % 4)) -eq 0 ]; then echo warn-line-$i >&2; fi; sleep 0.1; done",
			"name": "counter"}).ProcessID
		id := job
		b.open(p.panel + "devices/" + p.device)
		row := fmt.Sprintf(`tr[data-job=%q]`, id)
		b.await("the Device page lists the job", fmt.Sprintf(`!!document.querySelector('%s')`, row), 5*time.Second)
		// The owner is the principal as the CLI shows it, the token's own
		// ID, with the token's name (token create --name e2e) beside it.
		if owner := b.text(row + ` td[data-label="Owner"]`); !regexp.MustCompile(`^tok_[0-9a-f]{12} \(token e2e\)$`).MatchString(owner) {
			t.Errorf("the job's owner shows as %q, want its principal with the token's name beside it", owner)
		}
		if state := eval[string](b, `document.querySelector('`+row+` .badge').className`); state != "badge live" {
			t.Errorf("a running job's state badge is %q", state)
		}
		b.shot("device")
		b.atPhoneWidth(func() {
			b.fits("the Device page")
			b.shot("device-phone")
		})
		b.load("open the job", chromedp.Click(chromedp.CSS(row+` a`), chromedp.NodeVisible))
		b.await("the tail shows output", `document.getElementById("tail").textContent.includes("tail-line-")`, 10*time.Second)
		first := eval[int](b, `document.getElementById("tail").textContent.length`)
		b.await("the tail grows", fmt.Sprintf(`document.getElementById("tail").textContent.length > %d`, first+40), 10*time.Second)
		// stderr is told apart: its own spans, another colour, and only
		// what the job wrote there.
		b.await("the tail marks stderr", `[...document.querySelectorAll("#tail .err")].some(e => e.textContent.includes("warn-line-"))`, 10*time.Second)
		if !eval[bool](b, `(() => {
				const err = [...document.querySelectorAll("#tail .err")], out = document.querySelector("#tail .out");
				return err.every(e => !e.textContent.includes("tail-line-")) && !out.textContent.includes("warn-line-") &&
					getComputedStyle(err[0]).color !== getComputedStyle(out).color && document.querySelector("#tail *:not(span)") === null;
			})()`) {
			t.Errorf("stderr is not told apart from stdout in the tail: %q", eval[string](b, `document.getElementById("tail").innerHTML.slice(0, 2000)`))
		}
		b.shot("job")
		b.atPhoneWidth(func() {
			b.fits("the Job page")
			b.shot("job-phone")
		})
		b.submit("#stop")
		eval[bool](b, "window.stillThisPage = true")
		b.await("the page shows the job stopped", `document.getElementById("job-state").textContent === "stopped_by_request"`, 15*time.Second)
		// How it ended fills in as the tail ends, without a reload.
		b.await("the page shows how the job ended", `document.getElementById("job-ended").textContent !== "—" &&
			document.getElementById("job-how").textContent.includes("stopped by request") &&
			!["—", ""].includes(document.getElementById("job-took").textContent) && !document.getElementById("job-took").textContent.includes("so far")`, 10*time.Second)
		if !eval[bool](b, "window.stillThisPage === true") || eval[bool](b, `!!document.getElementById("stop")`) {
			t.Error("the page was reloaded, or still offers Stop")
		}
		if rec := c.waitTerminal(id, 15*time.Second); rec.State != "stopped_by_request" {
			t.Fatalf("the client sees the job %s, want stopped_by_request", rec.State)
		}
		b.shot("job-ended")
		// Opened after the end, the page shows what was kept of each
		// stream, labelled as such, stdout's then stderr's: the capture
		// does not record which came first between the two, and the
		// caption says so. Apart, each stream is alone in its block.
		b.open(p.panel + "devices/" + p.device + "/jobs/" + id)
		b.await("the ended job's output", `document.getElementById("tail").textContent.includes("warn-line-")`, 10*time.Second)
		parts := eval[[]string](b, `[...document.querySelectorAll("#tail .part")].map(e => e.textContent.trim())`)
		if want := []string{"── stdout, the end as kept before this page opened ──", "── stderr, the end as kept before this page opened ──"}; !slices.Equal(parts, want) {
			t.Errorf("the ended job's output is labelled %q, want %q", parts, want)
		}
		if caption := b.text("#tail-caption"); !strings.Contains(caption, "which came first between the two is not recorded") || strings.Contains(caption, "as they arrive") {
			t.Errorf("the output's caption claims an order: %q", caption)
		}
		if _, err := within(b, 10*time.Second, chromedp.Click(chromedp.CSS(`input[name="tail-view"][value="separate"]`), chromedp.NodeVisible)); err != nil {
			t.Fatalf("show the streams apart: %v", err)
		}
		if !eval[bool](b, `(() => {
				const out = document.getElementById("tail-stdout").textContent, err = document.getElementById("tail-stderr").textContent;
				return document.getElementById("tail").hidden && !document.getElementById("tail-apart").hidden &&
					out.includes("tail-line-") && !out.includes("warn-line-") && err.includes("warn-line-") && !err.includes("tail-line-");
			})()`) {
			t.Error("the streams apart are not each alone in its block")
		}
		b.shot("job-apart")
		// The tails were audited once each as they opened and closed, never
		// per long poll.
		testkit.Eventually(t, 10*time.Second, func() error {
			return tailsAudited(p, id)
		})
	})

	t.Run("a token created, used and revoked", func(t *testing.T) {
		b := b.with(t)
		b.open(p.panel + "tokens")
		b.fill("#t-name", "browser")
		b.fill("#t-devices", "dev1")
		b.submit("#create-token")
		secret := b.text("#new-token")
		if !strings.HasPrefix(secret, "cct_") {
			t.Fatalf("created token %q", secret)
		}
		b.allowClipboard()
		if _, err := within(b, 10*time.Second, chromedp.Click(chromedp.CSS(`button[data-copy="new-token"]`), chromedp.NodeVisible)); err != nil {
			t.Fatal(err)
		}
		b.await("the copy button says it copied", `document.querySelector('button[data-copy="new-token"]').textContent === "Copied"`, 5*time.Second)
		if got, err := within(b, 10*time.Second, chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise)); err != nil || got != secret {
			t.Errorf("the clipboard holds %q (%v), want the new token", got, err)
		}
		b.shot("token-created")
		k, err := testkit.Dial(t, "panel-token", testkit.Relayed(p.url+"/mcp/dev1", secret), nil)
		if err != nil {
			t.Fatalf("the new token does not connect: %v", err)
		}
		if _, isErr := k.Call("process.jobs", nil); isErr {
			t.Fatal("the new token's call failed")
		}
		// A connection's worth of tools (sixteen) and a long name keep the
		// token's State and Revoke on screen at 1,280 px and at a phone's
		// 390: the tools show as a summary that opens to the list.
		b.open(p.panel + "tokens")
		b.fill("#t-name", "a-token-for-the-nightly-integration-builds-of-every-branch")
		b.fill("#t-tools", "process.jobs,process.list,process.status,process.output,process.wait,process.screen,process.start,process.run,process.input,process.resize,process.stop,process.forget,files.list,files.read,files.search,files.write")
		b.submit("#create-token")
		b.open(p.panel + "tokens")
		wide := `tr[data-token]:has(button[aria-label^="Revoke a-token-for"])`
		onScreen := func(width int) {
			t.Helper()
			for _, sel := range []string{wide + ` td[data-label="State"] .badge`, wide + ` button[aria-label^="Revoke"]`} {
				if right := eval[float64](b, `document.querySelector('`+sel+`').getBoundingClientRect().right`); right <= 0 || right > float64(width) {
					t.Errorf("at %d px, %s ends at x = %.0f, off the screen", width, sel, right)
				}
			}
			if summary := b.text(wide + ` td[data-label="Tools"] summary`); summary != "16 tools" {
				t.Errorf("the sixteen tools show as %q, want 16 tools", summary)
			}
		}
		b.atWidth(1280, func() {
			onScreen(1280)
			b.shot("tokens")
		})
		b.atPhoneWidth(func() {
			onScreen(phoneWidth)
			b.fits("the Tokens page")
			b.shot("tokens-phone")
		})
		b.submit(`button[aria-label="Revoke browser"]`)
		res, err := k.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.jobs"})
		if err == nil && !res.IsError {
			t.Fatal("a revoked token's next call succeeded")
		}
		if page := b.text("#tokens"); !strings.Contains(page, "revoked") || strings.Contains(page, secret) {
			t.Fatalf("tokens page after revoking:\n%s", page)
		}
	})

	t.Run("enrollment and audit pages", func(t *testing.T) {
		b := b.with(t)
		b.open(p.panel + "enroll")
		b.submit(`form[action="/panel/enroll"] button`)
		if line := b.text("main"); !strings.Contains(line, " commandcore enroll --server "+p.url) || !strings.Contains(line, "COMMANDCORE_ENROLL_CODE=ccE-") ||
			!strings.Contains(line, "curl -fsSL "+p.url+"/install.sh | COMMANDCORE_ENROLL_CODE=ccE-") {
			t.Fatalf("enrollment page:\n%s", line)
		}
		b.shot("enroll")
		b.open(p.panel + "audit")
		if page := b.text("main"); !strings.Contains(page, "panel.token_create") || !strings.Contains(page, "admin:olga") || strings.Contains(page, "µs") {
			t.Fatalf("the audit page lacks the panel's actions, or shows raw microseconds:\n%s", page)
		}
		// The client's process.start links to the job it made.
		if n := eval[int](b, fmt.Sprintf(`document.querySelectorAll('#audit a[href="/panel/devices/%s/jobs/%s"]').length`, p.device, job)); n < 2 {
			t.Errorf("%d audit entries link to the job, want its start and the panel's calls", n)
		}
		if got, err := within(b, 10*time.Second, chromedp.Evaluate[string](`fetch("/favicon.ico").then(r => r.status + " " + r.headers.get("Content-Type"))`,
			chromedp.EvalAwaitPromise)); err != nil || got != "200 image/svg+xml" {
			t.Errorf("/favicon.ico: %s %v", got, err)
		}
		b.shot("audit")
	})

	t.Run("forged and tokenless changes are refused", func(t *testing.T) {
		b := b.with(t)
		b.open(p.panel + "tokens")
		csrf := eval[string](b, `document.querySelector('input[name="csrf"]').value`)
		// Another origin of the same site (the browser sends the
		// SameSite=Strict cookie), even with the session's own token.
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `<!doctype html><form method="post" action="%stokens"><input name="name" value="forged"><input name="csrf" value="%s"><button id="go">go</button></form>`, p.panel, csrf)
		}))
		defer evil.Close()
		b.open(evil.URL)
		if status := b.submit("#go"); status != http.StatusForbidden {
			t.Errorf("a cross-origin POST: %d, want 403", status)
		}
		// The panel's own form without its CSRF token.
		b.open(p.panel + "tokens")
		eval[bool](b, `document.querySelector('form[action="/panel/tokens"] input[name="csrf"]').remove(), true`)
		b.fill("#t-name", "tokenless")
		if status := b.submit("#create-token"); status != http.StatusForbidden {
			t.Errorf("a POST without the CSRF token: %d, want 403", status)
		}
		// No session at all.
		resp, err := http.PostForm(p.panel+"tokens", url.Values{"name": {"nosession"}, "csrf": {csrf}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("a POST without a session: %d, want 403", resp.StatusCode)
		}
		for _, tok := range strings.Split(p.relayCmd("token", "list", "--json"), "\n") {
			for _, name := range []string{"forged", "tokenless", "nosession"} {
				if strings.Contains(tok, `"name":"`+name+`"`) {
					t.Errorf("a refused POST made token %s", name)
				}
			}
		}
	})

	// No page the tests loaded broke the policy, and the check sees a
	// violation when there is one.
	if v := b.cspViolations(); len(v) > 0 {
		t.Errorf("CSP violations: %q", v)
	}

	b.open(p.panel + "login")
	eval[bool](b, `document.body.insertAdjacentHTML("beforeend", '<img src="http://192.0.2.1/x.png">'), true`)
	testkit.Eventually(t, 10*time.Second, func() error {
		if len(b.cspViolations()) == 0 {
			return fmt.Errorf("an image from another origin was not reported as a CSP violation: the check proves nothing (console: %q)", b.consoleLines())
		}
		return nil
	})

	// Last: it stops the relay and the agent to search what they wrote.
	t.Run("secret input", func(t *testing.T) { secretInBrowser(t, p) })
}

// tailsAudited checks that admin olga's tails of job were audited as
// they opened and closed (one to three of them: the page before and after
// Stop), naming the job, and never per long poll.
func tailsAudited(p *panelEnv, job string) error {
	var polls, opened, closed int
	for _, line := range strings.Split(p.relayCmd("audit", "--last", "1000", "--json"), "\n") {
		var e struct{ Principal, Tool, Job string }
		if json.Unmarshal([]byte(line), &e) != nil || e.Principal != "admin:olga" {
			continue
		}
		switch e.Tool {
		case "process.output":
			polls++
		case "panel.tail_open", "panel.tail_close":
			if e.Job != job {
				return fmt.Errorf("a tail's audit entry names job %q, want %s", e.Job, job)
			}
			if e.Tool == "panel.tail_open" {
				opened++
			} else {
				closed++
			}
		}
	}
	if polls != 0 || opened < 1 || opened > 4 || closed != opened {
		return fmt.Errorf("the tails were audited as %d process.output entries, %d opened and %d closed", polls, opened, closed)
	}
	return nil
}

// secretInBrowser: a client that declares URL elicitation asks for a
// secret for a job running `read -s`; the person types it in the page the
// client was sent to; the job gets it, the client only its byte count and,
// where the job printed it, ***; the marker is nowhere else.
func secretInBrowser(t *testing.T, p *panelEnv) {
	marker := "SECRET-" + uuid.NewString()
	urls := make(chan string, 1)
	opts := &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			urls <- r.Params.URL
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
	}
	k, err := testkit.Dial(t, "secret-client", testkit.Relayed(p.url+"/mcp/dev1", p.token), opts)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, session: k.Session, kit: k}
	id := c.start(map[string]any{"command": `read -s pw; echo "length ${#pw}"; echo "got $pw"`, "stdin": true}).ProcessID
	type answer struct {
		raw   json.RawMessage
		isErr bool
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		raw, isErr, err := testkit.Call(context.Background(), k.Session, "process.input", map[string]any{"process_id": id, "secret_prompt": "Password for the job:"})
		done <- answer{raw, isErr, err}
	}()
	var promptURL string
	select {
	case promptURL = <-urls:
	case a := <-done:
		t.Fatalf("the call ended without an elicitation: %s %v", a.raw, a.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no elicitation reached the client")
	}
	b := p.b.with(t)
	b.open(promptURL)
	if b.text("#prompt") != "Password for the job:" {
		t.Fatalf("the prompt page shows %q", b.text("#prompt"))
	}
	// The page shows what asks, read from the device with the admin's grant.
	if owner := b.text("#job-owner"); owner == "" || owner == "—" || eval[bool](b, `!!document.getElementById("printed-unread")`) {
		t.Fatalf("the prompt page does not show the job: owner %q, %q", owner, b.text("main"))
	}
	b.fill("#secret", marker)
	b.shot("secret")
	b.submit("#send-secret")
	if sent := b.text("#sent"); !strings.Contains(sent, fmt.Sprintf("took %d bytes", len(marker)+1)) {
		t.Fatalf("the page after sending: %q", sent)
	}
	var a answer
	select {
	case a = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the client's call did not end once the secret was sent")
	}
	var res struct {
		AcceptedBytes int `json:"accepted_bytes"`
	}
	if a.err != nil || a.isErr || json.Unmarshal(a.raw, &res) != nil || res.AcceptedBytes != len(marker)+1 || bytes.Contains(a.raw, []byte(marker)) {
		t.Fatalf("the client's result: %s %v, want accepted_bytes %d and no secret", a.raw, a.err, len(marker)+1)
	}
	c.waitTerminal(id, 15*time.Second)
	// The job printed the secret back: the model reads *** instead.
	if out := string(c.readAll(id, 0).data[0]); out != fmt.Sprintf("length %d\ngot ***\n", len(marker)) {
		t.Fatalf("the model reads %q", out)
	}

	// Stop both, so their journals and databases are flushed, then look
	// for the marker everywhere they wrote.
	p.agent.Process.Signal(syscall.SIGTERM)
	p.agent.Wait()
	p.relay.Process.Signal(syscall.SIGTERM)
	p.relay.Wait()
	for name, log := range map[string]string{"relay": p.relayLog.String(), "agent": p.agentLog.String()} {
		if strings.Contains(log, marker) {
			t.Errorf("the %s's log carries the secret", name)
		}
	}
	for _, dir := range []string{p.relayState, p.agentState, p.agentConfig} {
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Type()&fs.ModeSocket != 0 {
				return err
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatalf("read %s: %v", path, err)
			}
			defer f.Close()
			data, _ := io.ReadAll(f)
			if bytes.Contains(data, []byte(marker)) {
				t.Errorf("the secret is in %s", path)
			}
			return nil
		})
	}
}

// TestPanelLiveTailEndsWithTheSession: in headless Chromium, a job's
// live tail stops, saying the session ended, within 5 s of `relay admin
// revoke`, though the job goes on printing.
func TestPanelLiveTailEndsWithTheSession(t *testing.T) {
	p := startPanel(t)
	b := p.b
	p.signIn("tailer")
	c, err := p.connect("/mcp/dev1", p.token, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitOnline(t, c, nil)
	id := c.start(map[string]any{"command": "for i in $(seq 1 600); do echo line-$i; sleep 0.1; done"}).ProcessID
	b.open(p.panel + "devices/" + p.device + "/jobs/" + id)
	const tailLength = `document.getElementById("tail").textContent.length`
	b.await("the tail shows output", tailLength+` > 0`, 10*time.Second)
	p.relayCmd("admin", "revoke", "tailer")
	b.await("the page says its session ended", `(document.getElementById("signed-out") || {}).textContent === "Your session ended; sign in again to follow this page."`,
		limits.PanelLiveRecheck+time.Second)
	shown := eval[int](b, tailLength)
	time.Sleep(time.Second)
	if now := eval[int](b, tailLength); now != shown {
		t.Errorf("the tail grew from %d to %d characters after the session ended", shown, now)
	}
	if v := b.cspViolations(); len(v) > 0 {
		t.Errorf("CSP violations: %q", v)
	}
}
