package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// conformanceEnv opts into the official MCP conformance suite (make
// conformance installs it with npm first, in test/conformance).
const conformanceEnv = "COMMANDCORE_CONFORMANCE"

// conformanceResultsEnv names a directory to keep the suite's own results
// in (a checks.json per scenario); unset, they go with the test.
const conformanceResultsEnv = "COMMANDCORE_CONFORMANCE_RESULTS"

// conformanceDir holds the pinned suite and the Node 22 it needs.
const conformanceDir = "../../test/conformance"

// requirementSets are the protocol revisions whose server requirements the
// suite runs, each on its own wire (2025-11-25 stateful with initialize,
// 2026-07-28 stateless).
var requirementSets = []string{"2025-11-25", "2026-07-28"}

// notApplicable is what the suite asks of a server that only its own
// reference server has, keyed by scenario, or by "scenario:check" for one
// check of a scenario that is otherwise the relay's to pass: the suite's
// diagnostic tools, prompts and resources, and extensions the relay does
// not offer. A scenario here never fails the test; its result is reported
// as the suite saw it.
var notApplicable = map[string]string{
	"completion-complete": "completes an argument of the suite's prompt test_prompt_with_arguments; completion is a capability of servers with prompts or resource templates; the relay has neither and declares no completions",

	"tools-call-simple-text":       "calls the suite's tool test_simple_text",
	"tools-call-image":             "calls the suite's tool test_image_content",
	"tools-call-audio":             "calls the suite's tool test_audio_content",
	"tools-call-embedded-resource": "calls the suite's tool test_embedded_resource",
	"tools-call-mixed-content":     "calls the suite's tool test_multiple_content_types",
	"tools-call-with-logging":      "calls the suite's tool test_tool_with_logging",
	"tools-call-error":             "calls the suite's tool test_error_handling",
	"tools-call-with-progress":     "calls the suite's tool test_tool_with_progress",
	"tools-call-sampling":          "calls the suite's tool test_sampling",
	"tools-call-elicitation":       "calls the suite's tool test_elicitation",
	"elicitation-sep1034-defaults": "calls the suite's tool test_elicitation_sep1034_defaults",
	"elicitation-sep1330-enums":    "calls the suite's tool test_elicitation_sep1330_enums",
	"json-schema-2020-12":          "looks for the suite's tool json_schema_2020_12_tool",
	"server-sse-polling":           "calls the suite's tool test_reconnection",

	"resources-read-text":      "reads the suite's resource test://static-text; the relay serves no resources",
	"resources-read-binary":    "reads the suite's resource test://static-binary; the relay serves no resources",
	"resources-templates-read": "reads the suite's resource template test://template/{id}/data; the relay serves no resources",
	"resources-subscribe":      "subscribes to the suite's resource test://watched-resource; the relay serves no resources and declares no resources capability",
	"resources-unsubscribe":    "unsubscribes from the suite's resource test://watched-resource; the relay serves no resources and declares no resources capability",

	"prompts-get-simple":            "gets the suite's prompt test_simple_prompt; the relay has no prompts",
	"prompts-get-with-args":         "gets the suite's prompt test_prompt_with_arguments; the relay has no prompts",
	"prompts-get-embedded-resource": "gets the suite's prompt test_prompt_with_embedded_resource; the relay has no prompts",
	"prompts-get-with-image":        "gets the suite's prompt test_prompt_with_image; the relay has no prompts",

	"input-required-result-basic-elicitation":       "calls the suite's tool test_input_required_result_elicitation",
	"input-required-result-basic-sampling":          "calls the suite's tool test_input_required_result_sampling",
	"input-required-result-basic-list-roots":        "calls the suite's tool test_input_required_result_list_roots",
	"input-required-result-request-state":           "calls the suite's tool test_input_required_result_request_state",
	"input-required-result-multiple-input-requests": "calls the suite's tool test_input_required_result_multiple_inputs",
	"input-required-result-multi-round":             "calls the suite's tool test_input_required_result_multi_round",
	"input-required-result-missing-input-response":  "calls the suite's tool test_input_required_result_elicitation",
	"input-required-result-non-tool-request":        "gets the suite's prompt test_input_required_result_prompt",
	"input-required-result-result-type":             "calls the suite's tool test_input_required_result_elicitation",
	"input-required-result-tampered-state":          "calls the suite's tool test_input_required_result_tampered_state",
	"input-required-result-capability-check":        "calls the suite's tool test_input_required_result_capabilities",
	"input-required-result-ignore-extra-params":     "calls the suite's tool test_input_required_result_elicitation",
	"input-required-result-validate-input":          "calls the suite's tool test_input_required_result_elicitation",

	"http-custom-header-server-validation": "needs a tool with parameters mirrored into Mcp-Param headers (x-mcp-header); no tool of the relay has one",

	"tasks-lifecycle":              "the Tasks extension, which the relay does not offer (its jobs are tools); calls the suite's tools greet, slow_compute, failing_job, protocol_error_job",
	"tasks-capability-negotiation": "the Tasks extension, which the relay does not offer; calls the suite's tool slow_compute",
	"tasks-wire-fields":            "the Tasks extension, which the relay does not offer; calls the suite's tool slow_compute",
	"tasks-request-state-removal":  "the Tasks extension, which the relay does not offer; calls the suite's tool slow_compute",
	"tasks-mrtr-input":             "the Tasks extension, which the relay does not offer; calls the suite's tools confirm_delete, multi_input",
	"tasks-request-headers":        "the Tasks extension, which the relay does not offer; calls the suite's tools greet, slow_compute",
	"tasks-dispatch-and-envelope":  "the Tasks extension, which the relay does not offer; calls the suite's tools greet, slow_compute, failing_job, confirm_delete",
	"tasks-status-notifications":   "the Tasks extension, which the relay does not offer (the suite skips it itself)",
	"tasks-required-task-error":    "the Tasks extension, which the relay does not offer; calls the suite's tool failing_job",
	"tasks-mrtr-composition":       "the Tasks extension, which the relay does not offer; calls the suite's tool test_tool_with_task",

	"server-stateless:sep-2575-server-rejects-undeclared-capability":              "calls the suite's tool test_missing_capability",
	"server-stateless:sep-2575-missing-capability-http-400":                       "calls the suite's tool test_missing_capability",
	"server-stateless:sep-2575-http-server-no-independent-requests-on-stream":     "calls the suite's tool test_streaming_elicitation",
	"server-stateless:sep-2575-server-no-log-without-loglevel":                    "calls the suite's tool test_logging_tool",
	"server-stateless:sep-2575-server-sends-tools-list-changed-on-subscription":   "changes the tool list through the suite's tool test_trigger_tool_change",
	"server-stateless:sep-2575-server-sends-prompts-list-changed-on-subscription": "changes the prompt list through the suite's tool test_trigger_prompt_change",
}

// conformanceCheck is one entry of a scenario's checks.json.
type conformanceCheck struct {
	ID           string          `json:"id"`
	Status       string          `json:"status"`
	ErrorMessage string          `json:"errorMessage"`
	Details      json.RawMessage `json:"details"`
}

// message is what the check says: its error message, or else its
// details' message, with its details compacted.
func (c conformanceCheck) message() string {
	var details struct{ Message string }
	json.Unmarshal(c.Details, &details)
	msg := c.ErrorMessage
	if msg == "" {
		msg = details.Message
	}
	if c.failed() && len(c.Details) > 0 && string(c.Details) != "null" {
		var b bytes.Buffer
		if json.Compact(&b, c.Details) == nil {
			msg += " " + b.String()
		}
	}
	return msg
}

// failed reports whether the suite counts the check as failed.
func (c conformanceCheck) failed() bool { return c.Status == "FAILURE" || c.Status == "ERROR" }

// conformanceScenario is one scenario the suite ran and what it found.
type conformanceScenario struct {
	set       string // a requirement set, or "authorization"
	name      string
	notScored string // why the set runs it without scoring it, if it does
	checks    []conformanceCheck
}

// verdict judges the scenario: "passes", "fails" or "not applicable",
// with a note saying why, and the failed checks that are the relay's.
func (s conformanceScenario) verdict() (result, note string, failures []conformanceCheck) {
	passed, suiteFailed := 0, false
	var excused, noted []string
	for _, c := range s.checks {
		if c.Status == "SUCCESS" {
			passed++
		}
		suiteFailed = suiteFailed || c.failed()
		why, na := notApplicable[s.name+":"+c.ID]
		switch {
		case na && c.Status != "SUCCESS":
			excused = append(excused, fmt.Sprintf("%s (%s, %s)", c.ID, strings.ToLower(c.Status), why))
		case c.failed():
			failures = append(failures, c)
		case c.Status != "SUCCESS":
			noted = append(noted, fmt.Sprintf("%s %s: %s", c.ID, strings.ToLower(c.Status), c.message()))
		}
	}
	if why, ok := notApplicable[s.name]; ok {
		if !suiteFailed {
			why += fmt.Sprintf("; the suite counts it passed (%d of %d checks)", passed, len(s.checks))
		}
		return "not applicable", why, nil
	}
	var notes []string
	if len(failures) > 0 {
		result = "fails"
		for _, c := range failures {
			notes = append(notes, fmt.Sprintf("%s failed: %s", c.ID, c.message()))
		}
	} else {
		result = "passes"
	}
	notes = append(notes, fmt.Sprintf("%d of %d checks passed", passed, len(s.checks)))
	if len(excused) > 0 {
		notes = append(notes, "not applicable: "+strings.Join(excused, "; "))
	}
	notes = append(notes, noted...)
	return result, strings.Join(notes, "; "), failures
}

// TestConformanceSuite runs the official MCP conformance suite
// (@modelcontextprotocol/conformance, pinned in test/conformance) against
// the real relay with an enrolled agent: the server requirement sets of
// protocol revisions 2025-11-25 and 2026-07-28 at a device's MCP URL,
// through a proxy that adds the static token the suite cannot send, and
// the suite's authorization-server scenarios, the person approving its
// authorization request in Chromium. It fails when a scenario that is the
// relay's to pass fails, and logs every scenario's result.
func TestConformanceSuite(t *testing.T) {
	if os.Getenv(conformanceEnv) == "" {
		t.Skip("the conformance suite runs in make conformance (" + conformanceEnv + "=1)")
	}
	if _, err := os.Stat(filepath.Join(conformanceDir, "node_modules", ".bin", "conformance")); err != nil {
		t.Fatalf("the suite is not installed (make conformance runs npm install in test/conformance): %v", err)
	}

	// The relay's public URL is the proxy's: it is where clients reach
	// the relay, so the issuer, the resource and the one allowed Origin
	// are the proxy's, as behind any front end.
	proxy := newTokenProxy(t)
	p := startPanel(t, "--public-url", proxy.URL)
	proxy.to(t, p.url, p.token)
	endpoint := proxy.URL + "/mcp/dev1"

	var all []conformanceScenario
	legs := 0
	judge := func(t *testing.T, scenarios []conformanceScenario) {
		legs++
		for _, s := range scenarios {
			_, _, failures := s.verdict()
			for _, c := range failures {
				t.Errorf("%s %s: check %s failed: %s", s.set, s.name, c.ID, c.message())
			}
		}
		all = append(all, scenarios...)
	}
	for _, set := range requirementSets {
		t.Run("server "+set, func(t *testing.T) {
			judge(t, runConformance(t, set, nil, "server", "--url", endpoint, "--requirements", set))
		})
	}
	t.Run("authorization", func(t *testing.T) {
		port := freePort(t)
		clientID := registerClient(t, proxy.URL, fmt.Sprintf("http://127.0.0.1:%d/callback", port))
		approve := func(line string) {
			u, err := url.Parse(line)
			if err != nil || u.Scheme == "" || u.Path != "/authorize" {
				return
			}
			approveInBrowser(t, p, line, port)
		}
		judge(t, runConformance(t, "authorization", approve,
			"authorization", "--url", proxy.URL, "--client-id", clientID, "--resource", endpoint,
			"-p", fmt.Sprint(port)))
	})

	ran := map[string]bool{}
	var table strings.Builder
	table.WriteString("| requirement set | scenario | result | why / notes |\n|---|---|---|---|\n")
	for _, s := range all {
		ran[s.name] = true
		result, note, _ := s.verdict()
		set := s.set
		if s.notScored != "" {
			set += " (not scored: " + s.notScored + ")"
		}
		fmt.Fprintf(&table, "| %s | %s | %s | %s |\n", set, s.name, result, strings.ReplaceAll(note, "|", `\|`))
	}
	t.Logf("the conformance suite against the relay:\n%s", table.String())
	// The list of what is not applicable follows the pinned suite.
	for key := range notApplicable {
		if name, _, _ := strings.Cut(key, ":"); !ran[name] && legs == len(requirementSets)+1 {
			t.Errorf("notApplicable names %s, a scenario the suite did not run", name)
		}
	}
}

// tokenProxy is a reverse proxy on loopback in front of the relay that
// adds a static client token to every request for an MCP URL, since the
// suite sends none. It keeps the Host header as the client sent it, so
// the relay sees what a client of the proxy's address sends.
type tokenProxy struct {
	*httptest.Server
	target atomic.Pointer[tokenTarget]
}

type tokenTarget struct {
	relay *url.URL
	token string
}

func newTokenProxy(t *testing.T) *tokenProxy {
	p := &tokenProxy{}
	rp := &httputil.ReverseProxy{
		// A progress stream or a subscription passes as it comes.
		FlushInterval: -1,
		// A stream the suite closes is no news.
		ErrorLog: log.New(io.Discard, "", 0),
		Rewrite: func(r *httputil.ProxyRequest) {
			to := p.target.Load()
			r.Out.URL.Scheme, r.Out.URL.Host = to.relay.Scheme, to.relay.Host
			if r.In.URL.Path == "/mcp" || strings.HasPrefix(r.In.URL.Path, "/mcp/") {
				r.Out.Header.Set("Authorization", "Bearer "+to.token)
			}
		},
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.target.Load() == nil {
			http.Error(w, "the relay is not up yet", http.StatusServiceUnavailable)
			return
		}
		// The request goes on whole: with its body streamed, the
		// proxy's transport now and then closed its connection to the
		// relay half way through an answer (a 25 KB tools/list cut at
		// 4 KB, "use of closed network connection"), which the suite
		// read as an answer without a result.
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// to points the proxy at the relay listening at relay, with token.
func (p *tokenProxy) to(t *testing.T, relay, token string) {
	u, err := url.Parse(relay)
	if err != nil {
		t.Fatal(err)
	}
	p.target.Store(&tokenTarget{relay: u, token: token})
}

// runConformance runs the suite's CLI with args, handing each line it
// prints to onLine, and returns the scenarios it ran with their checks.
func runConformance(t *testing.T, set string, onLine func(string), args ...string) []conformanceScenario {
	t.Helper()
	out := t.TempDir()
	if keep := os.Getenv(conformanceResultsEnv); keep != "" {
		out = filepath.Join(keep, set)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := filepath.Abs(filepath.Join(conformanceDir, "node_modules", ".bin"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "conformance"), append(args, "-o", out)...)
	// node_modules/.bin first: the script runs on the Node 22 there.
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		printed   strings.Builder
		order     []string
		dirs      = map[string]string{}
		notScored = map[string]string{}
		current   string
	)
	running := regexp.MustCompile(`^=== Running scenario: (\S+) ===$`)
	unscored := regexp.MustCompile(`^\s+[✓✗]\s+(\S+)\s+\(([a-z-]+)\)$`)
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		line := lines.Text()
		printed.WriteString(line + "\n")
		if m := running.FindStringSubmatch(line); m != nil {
			current = m[1]
			order = append(order, current)
		} else if dir, ok := strings.CutPrefix(line, "Results saved to "); ok && current != "" {
			dirs[current] = dir
		} else if m := unscored.FindStringSubmatch(line); m != nil {
			notScored[m[1]] = m[2]
		}
		if onLine != nil {
			onLine(line)
		}
	}
	io.Copy(io.Discard, stdout)
	// The suite exits 1 when a scenario it scores fails; that is judged
	// below, scenario by scenario, like any other result.
	if err := cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("conformance %v: %v\n%s%s", args, err, printed.String(), stderr.String())
		}
	}
	if len(order) == 0 {
		t.Fatalf("conformance %v ran no scenario:\n%s%s", args, printed.String(), stderr.String())
	}
	var scenarios []conformanceScenario
	for _, name := range order {
		s := conformanceScenario{set: set, name: name, notScored: notScored[name]}
		raw, err := os.ReadFile(filepath.Join(dirs[name], "checks.json"))
		if err == nil {
			err = json.Unmarshal(raw, &s.checks)
		}
		if err != nil {
			s.checks = []conformanceCheck{{ID: "results", Status: "FAILURE", ErrorMessage: fmt.Sprintf("no results: %v", err)}}
		}
		scenarios = append(scenarios, s)
	}
	return scenarios
}

// freePort is a loopback port nothing listens on just now.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// registerClient registers a public client with redirect at the relay's
// registration endpoint, as the suite expects of its --client-id.
func registerClient(t *testing.T, base, redirect string) string {
	body, _ := json.Marshal(map[string]any{"client_name": "MCP conformance suite", "redirect_uris": []string{redirect}})
	resp, err := http.Post(base+"/register", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		ClientID string `json:"client_id"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(raw, &got) != nil || got.ClientID == "" {
		t.Fatalf("register the suite's client: %d %s", resp.StatusCode, raw)
	}
	return got.ClientID
}

// approveInBrowser plays the person the suite asks to open an
// authorization URL: signed out, the panel asks for a sign-in code, comes
// back to its consent page, and Allow sends the browser to the suite's
// callback on port.
func approveInBrowser(t *testing.T, p *panelEnv, authorize string, port int) {
	t.Helper()
	b := p.b
	b.open(authorize)
	if path := eval[string](b, "location.pathname"); path != "/panel/login" {
		t.Fatalf("the authorization URL led a signed-out browser to %s, not the sign-in page", path)
	}
	(&consentInBrowser{p: p}).signInWithCode()
	b.await("signed in, the browser is back at the consent page", `location.pathname.startsWith('/panel/consent/') && !!document.querySelector('#allow')`, 10*time.Second)
	b.submit("#allow")
	b.await("the browser reached the suite's callback", fmt.Sprintf("location.origin === 'http://127.0.0.1:%d' && location.pathname === '/callback'", port), 10*time.Second)
}
