package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/commandcore/commandcore/internal/pgtest"
	"github.com/commandcore/commandcore/internal/relay/panel"
)

// screenshotsEnv names the directory the browser tests write their
// screenshots to (docs/panel.md's come from there); unset, a directory
// under the system's temporary one.
const screenshotsEnv = "COMMANDCORE_SCREENSHOTS"

// browser is a headless Chromium driven over the DevTools protocol. It
// records every console message the pages log, so a test can look for
// Content-Security-Policy violations, and checks the panel's headers on
// every document it loads.
type browser struct {
	t *testing.T
	*tab
}

// tab is the browser's one tab and what its pages logged.
type tab struct {
	ctx context.Context
	dir string
	// site is the URL prefix of the pages whose headers load checks.
	site string

	mu      sync.Mutex
	console []string
}

// with is the browser for a subtest: its failures are t's.
func (b *browser) with(t *testing.T) *browser { return &browser{t: t, tab: b.tab} }

// chromium finds Debian's chromium (or another Chrome) on PATH.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	// The engines' switch covers the browser too: CI installs it.
	if os.Getenv(pgtest.RequireEnv) == "" {
		t.Skip("no chromium on PATH (apt-get install chromium)")
	}
	t.Fatal("no chromium on PATH, and " + pgtest.RequireEnv + " is set (apt-get install chromium)")
	return ""
}

// newBrowser starts Chromium; every document it loads from site must
// carry the panel's headers.
func newBrowser(t *testing.T, site string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		// Tests run as root, where Chromium's sandbox cannot start.
		chromedp.NoSandbox,
		chromedp.WindowSize(1100, 760),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		// Tests reach only loopback: a page that names another host (a
		// chat client's own site, say) resolves to nothing.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{t: t, tab: &tab{dir: os.Getenv(screenshotsEnv), site: site}}
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithListener(b.listen))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b.ctx = ctx
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if b.dir == "" {
		b.dir = filepath.Join(os.TempDir(), "commandcore-panel-screenshots")
	}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *tab) listen(ev any) {
	var line string
	switch e := ev.(type) {
	case *log.EventEntryAdded:
		line = fmt.Sprintf("%s %s: %s", e.Entry.Source, e.Entry.Level, e.Entry.Text)
	case *runtime.EventConsoleAPICalled:
		var parts []string
		for _, a := range e.Args {
			parts = append(parts, strings.Trim(string(a.Value), `"`)+a.Description)
		}
		line = fmt.Sprintf("console %s: %s", e.Type, strings.Join(parts, " "))
	case *runtime.EventExceptionThrown:
		line = "exception: " + e.ExceptionDetails.Text
		if e.ExceptionDetails.Exception != nil {
			line += " " + e.ExceptionDetails.Exception.Description
		}
	default:
		return
	}
	b.mu.Lock()
	b.console = append(b.console, line)
	b.mu.Unlock()
}

// consoleLines returns what the pages logged so far.
func (b *browser) consoleLines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.console...)
}

// cspViolations are the console's reports of the policy refusing
// something.
func (b *browser) cspViolations() []string {
	var v []string
	for _, l := range b.consoleLines() {
		if strings.Contains(l, "Content Security Policy") {
			v = append(v, l)
		}
	}
	return v
}

// within runs an action with a deadline, on the browser's tab.
func within[T any](b *browser, d time.Duration, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// load runs steps that load a document (a navigation, a click on a link
// or a submit button) and returns its status, after checking the headers
// every panel answer carries.
func (b *browser) load(what string, steps ...chromedp.Action[chromedp.Void]) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	if strings.HasPrefix(resp.URL, b.site) {
		b.checkHeaders(what, resp)
	}
	return resp.Status
}

// open loads url.
func (b *browser) open(url string) int64 {
	b.t.Helper()
	return b.load("open "+url, chromedp.Navigate(url))
}

// submit clicks the button sel and waits for the document it loads.
func (b *browser) submit(sel string) int64 {
	b.t.Helper()
	return b.load("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

func (b *browser) checkHeaders(what string, resp *network.Response) {
	b.t.Helper()
	for name, want := range map[string]string{
		"Content-Security-Policy": panel.CSP,
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
	} {
		if got := header(resp.Headers, name); got != want {
			b.t.Errorf("%s (%s): %s is %q, want %q", what, resp.URL, name, got, want)
		}
	}
}

// header reads a response header whatever its case.
func header(h network.Headers, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			s, _ := v.(string)
			return s
		}
	}
	return ""
}

// text is the text of the element sel.
func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := within(b, 10*time.Second, chromedp.Text(chromedp.CSS(sel), chromedp.NodeReady))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// eval evaluates a JavaScript expression in the page (over the DevTools
// protocol, which the page's policy does not govern).
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := within(b, 10*time.Second, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// await waits until the JavaScript predicate expr holds, reading it every
// 100 ms without reloading the page.
func (b *browser) await(what, expr string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := within(b, 5*time.Second, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.shot("failed-" + strings.ReplaceAll(b.t.Name(), "/", "-"))
			b.t.Fatalf("after %s: %s (%v)", timeout, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fill sets a form field's value, as typing would.
func (b *browser) fill(sel, value string) {
	b.t.Helper()
	eval[bool](b, fmt.Sprintf(`document.querySelector(%q).value = "", true`, sel))
	if _, err := within(b, 10*time.Second, chromedp.SendKeys(chromedp.CSS(sel), value, chromedp.NodeVisible)); err != nil {
		b.t.Fatalf("fill %s: %v", sel, err)
	}
}

// shot writes a screenshot of the whole page as name.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := within(b, 20*time.Second, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644); err != nil {
		b.t.Error(err)
	}
}

// phoneWidth is the width, in CSS pixels, of the phone the panel's pages
// are checked at (an iPhone 12 to 15's).
const phoneWidth = 390

// atPhoneWidth runs f with the page laid out at phoneWidth, then at the
// browser's own size again.
func (b *browser) atPhoneWidth(f func()) {
	b.t.Helper()
	b.atViewport(chromedp.EmulateViewport(phoneWidth, 844, chromedp.EmulatePortrait, chromedp.EmulateMobile), f)
}

// atWidth runs f with the page laid out in a desktop window width pixels
// wide, then at the browser's own size again.
func (b *browser) atWidth(width int64, f func()) {
	b.t.Helper()
	b.atViewport(chromedp.EmulateViewport(width, 800), f)
}

func (b *browser) atViewport(view chromedp.Action[chromedp.Void], f func()) {
	b.t.Helper()
	if _, err := within(b, 10*time.Second, view); err != nil {
		b.t.Fatalf("viewport: %v", err)
	}
	defer within(b, 10*time.Second, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.ClearDeviceMetricsOverride, cdp.Empty{})
		return err
	}))
	f()
}

// fits checks that the page needs no sideways scrolling and that every
// table cell is within the window: nothing is cut off.
func (b *browser) fits(what string) {
	b.t.Helper()
	const cut = `[document.documentElement, ...document.querySelectorAll("main td, main dd, main pre")]
		.filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5 || e.scrollWidth > e.clientWidth + 1 && e.tagName !== "PRE")
		.map(e => e.tagName + ": " + e.textContent.trim().slice(0, 40))`
	if out := eval[[]string](b, cut); len(out) > 0 {
		b.t.Errorf("%s at %d px wide cuts off %q", what, phoneWidth, out)
	}
}

// allowClipboard lets the pages of the browser's one context write and
// read the clipboard, as a person who allowed it.
func (b *browser) allowClipboard() {
	b.t.Helper()
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		grant := chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := cdp.Call(ctx, chromedp.FromContext(ctx).Browser, cdpbrowser.SetPermission,
				cdpbrowser.SetPermissionParams{Permission: &cdpbrowser.PermissionDescriptor{Name: name, AllowWithoutSanitization: true}, Setting: cdpbrowser.PermissionSettingGranted})
			return err
		})
		if _, err := within(b, 10*time.Second, grant); err != nil {
			b.t.Fatalf("grant %s: %v", name, err)
		}
	}
}

// answerFor answers, in the browser itself, every request to a URL that
// starts with one of prefixes with a small page, and sends the URL of
// each such page the browser navigates to on the channel it returns: a chat client's redirect back to its own site
// (https://claude.ai/…, https://chatgpt.com/…) is seen without leaving
// this machine.
func (b *browser) answerFor(prefixes ...string) <-chan string {
	b.t.Helper()
	urls := make(chan string, 16)
	paused := make(chan fetch.RequestID, 16)
	if err := chromedp.Listen(b.ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			if e.ResourceType == network.ResourceTypeDocument {
				select {
				case urls <- e.Request.URL:
				default:
				}
			}
			select {
			case paused <- e.RequestID:
			default:
			}
		}
	}); err != nil {
		b.t.Fatal(err)
	}
	ctx := b.ctx
	go func() {
		for {
			select {
			case id := <-paused:
				chromedp.Run(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
					_, err := cdp.Call(ctx, t, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: id, ResponseCode: 200,
						ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "text/html; charset=utf-8"}},
						Body:            []byte(`<!doctype html><title>Client</title><p id="back">Back in the client.</p>`)})
					return err
				}))
			case <-ctx.Done():
				return
			}
		}
	}()
	var patterns []*fetch.RequestPattern
	for _, p := range prefixes {
		patterns = append(patterns, &fetch.RequestPattern{URLPattern: p + "*", RequestStage: fetch.RequestStageRequest})
	}
	enable := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, fetch.Enable, fetch.EnableParams{Patterns: patterns})
		return err
	})
	if _, err := within(b, 10*time.Second, enable); err != nil {
		b.t.Fatalf("intercept %v: %v", prefixes, err)
	}
	return urls
}
