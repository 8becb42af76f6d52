package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/testkit"
)

// TestRelayRevocationIsExact: through the real relay and agent, 100 times
// a token of principal alice is revoked with `relay token revoke` while
// calls with it keep arriving; every call that starts after the command
// has returned is refused (process.output and process.stop among them, so
// alice's job still runs at the end), and bob's token, of another
// principal, works throughout.
func TestRelayRevocationIsExact(t *testing.T) {
	e := startRelay(t)
	e.enrollAgent("dev1")
	st, err := store.Open(e.relayState)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	token := func(principal string) (id, secret string) {
		t.Helper()
		tok, secret, err := st.CreateToken(store.TokenSpec{Name: principal, Devices: []string{"dev1"}, Tools: []string{"*"},
			Principal: principal, TTL: time.Hour}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok.ID, secret
	}
	session := func(secret string) *client {
		t.Helper()
		c, err := e.connect("/mcp/dev1", secret, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	_, aliceSecret := token("alice")
	alice := session(aliceSecret)
	waitOnline(t, alice, nil)
	aliceJob := alice.start(map[string]any{"command": "echo alice; exec sleep 300"}).ProcessID
	_, bobSecret := token("bob")
	bob := session(bobSecret)
	bobJob := bob.start(map[string]any{"command": "echo bob; exec sleep 300"}).ProcessID
	output := map[string]any{"process_id": aliceJob}

	// refused reports whether a call was turned away for its token; any
	// other failure ends the test.
	refused := func(c *client, tool string, args any) bool {
		res, err := c.session.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		switch {
		case err != nil && strings.Contains(err.Error(), "Unauthorized"):
			return true
		case err != nil:
			t.Errorf("%s: %v", tool, err)
		case res.IsError:
			t.Errorf("%s failed: %+v", tool, res.StructuredContent)
		}
		return false
	}
	for round := range 100 {
		id, secret := token("alice")
		c := session(secret)
		if refused(c, "process.output", output) {
			t.Fatalf("round %d: a new token was refused", round)
		}
		var late atomic.Int64 // calls that started after the revocation returned and were served
		var revoked atomic.Bool
		halt := hammer(func() {
			after := revoked.Load()
			if !refused(c, "process.output", output) && after {
				late.Add(1)
			}
		})
		func() {
			// Calls keep arriving while the revocation runs.
			defer halt()
			e.relayCmd("token", "revoke", id)
			revoked.Store(true)
			if !refused(c, "process.output", output) || !refused(c, "process.stop", map[string]any{"process_id": aliceJob}) {
				t.Fatalf("round %d: a call right after `relay token revoke` returned was served", round)
			}
		}()
		if n := late.Load(); n > 0 {
			t.Fatalf("round %d: %d calls that started after `relay token revoke` returned were served", round, n)
		}
		if refused(bob, "process.output", map[string]any{"process_id": bobJob}) {
			t.Fatalf("round %d: revoking alice's token refused bob's", round)
		}
	}
	if r := alice.status(aliceJob); r.State != "running" {
		t.Fatalf("alice's job is %s: a stop with a revoked token got through", r.State)
	}
	alice.stopAndWait(aliceJob)
	bob.stopAndWait(bobJob)
}

// hammer calls call over and over in another goroutine until the returned
// function is called, which waits for the last call to end.
func hammer(call func()) (halt func()) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				call()
			}
		}
	}()
	return func() { close(stop); <-done }
}

// auditLine is a line of `relay audit --json`: a call, or a count of
// requests refused without a valid token.
type auditLine struct {
	Kind string `json:"kind"`
	store.AuditEntry
	Source string `json:"source"`
	Count  int64  `json:"count"`
}

// TestRelayAuditSurvivesATokenFlood: more requests with bad client tokens
// than the audit log holds, from one address, push no authenticated call
// out of `relay audit`, neither the history from before the flood nor the
// call right after it; the refusals show as counts for the address.
func TestRelayAuditSurvivesATokenFlood(t *testing.T) {
	e, c := onlineDevice(t)
	var toks []struct{ ID string }
	for _, line := range strings.Split(e.relayCmd("token", "list", "--json"), "\n") {
		var tok struct{ ID string }
		json.Unmarshal([]byte(line), &tok)
		toks = append(toks, tok)
	}
	tokenID := toks[0].ID
	for range 3 {
		c.ok("process.jobs", nil, nil)
	}
	audit := func() (calls []store.AuditEntry, refused map[string]int64) {
		t.Helper()
		refused = map[string]int64{}
		for _, line := range strings.Split(e.relayCmd("audit", "--last", strconv.Itoa(limits.AuditMaxEntries), "--json"), "\n") {
			var l auditLine
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("audit line %q: %v", line, err)
			}
			if l.Kind == "refusals" {
				refused[l.Source] += l.Count
			} else {
				calls = append(calls, l.AuditEntry)
			}
		}
		return calls, refused
	}
	// The history from before the flood, once written.
	var before []store.AuditEntry
	testkit.Eventually(t, 10*time.Second, func() error {
		if before, _ = audit(); len(before) < 3 {
			return fmt.Errorf("the audit never showed the calls: %+v", before)
		}
		return nil
	})

	const flood = limits.AuditMaxEntries + 1000
	if n := floodBadTokens(t, strings.TrimPrefix(e.url, "http://"), flood); n != flood {
		t.Fatalf("%d of %d bad tokens were refused with 401", n, flood)
	}
	c.ok("system.metrics", nil, nil)

	var calls []store.AuditEntry
	var refused map[string]int64
	// On timeout the checks below say what the audit lacks.
	_ = testkit.PollEvery(30*time.Second, 100*time.Millisecond, func() error {
		calls, refused = audit()
		if n := len(calls); n == 0 || calls[n-1].Tool != "system.metrics" || refused["127.0.0.1"] != flood {
			return errors.New("the audit lacks the call after the flood or some refusals")
		}
		return nil
	})
	if n := len(calls); n == 0 || calls[n-1].Tool != "system.metrics" {
		t.Errorf("the call after the flood is not in the audit (%d calls there)", n)
	}
	if len(calls) < len(before) || calls[0].Seq != before[0].Seq {
		t.Errorf("the history from before the flood was pushed out: %d calls, the oldest seq %d, was %d", len(calls), calls[0].Seq, before[0].Seq)
	}
	for _, a := range calls {
		if a.TokenID != tokenID {
			t.Errorf("an audit entry of another token than the client's: %+v", a)
			break
		}
	}
	if len(refused) != 1 || refused["127.0.0.1"] != flood {
		t.Errorf("refusal counts by source %v, want %d for 127.0.0.1", refused, flood)
	}
	if table := e.relayCmd("audit", "--last", "5"); !strings.Contains(table, "Requests refused without a valid client token") || !strings.Contains(table, "127.0.0.1") {
		t.Errorf("audit table:\n%s", table)
	}
}

// floodBadTokens sends n requests to addr's /mcp with bad client tokens
// (malformed, unknown, none), pipelined on a few connections so the flood
// costs the test little, and returns how many were refused with 401.
func floodBadTokens(t *testing.T, addr string, n int) int {
	t.Helper()
	const workers, batch = 4, 500
	bad := []string{"Authorization: Bearer cct_bogus\r\n", "Authorization: Bearer cct_tok_000000000000_" + strings.Repeat("A", 43) + "\r\n", ""}
	var wg sync.WaitGroup
	var refused atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			r := bufio.NewReader(conn)
			for sent := w; sent < n; {
				var reqs strings.Builder
				k := 0
				for ; k < batch && sent < n; k, sent = k+1, sent+workers {
					fmt.Fprintf(&reqs, "GET /mcp HTTP/1.1\r\nHost: %s\r\n%s\r\n", addr, bad[sent%len(bad)])
				}
				if _, err := io.WriteString(conn, reqs.String()); err != nil {
					t.Error(err)
					return
				}
				for range k {
					resp, err := http.ReadResponse(r, nil)
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusUnauthorized {
						refused.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	return int(refused.Load())
}

// TestRelayPanelOffLoopbackNeedsTLS: `relay serve --panel-listen` on an
// address that is not loopback, without TLS or --panel-insecure, refuses
// to start with one line naming the way out, and serves nothing.
func TestRelayPanelOffLoopbackNeedsTLS(t *testing.T) {
	listens := []string{"0.0.0.0:0"}
	if ip := nonLoopbackIP(); ip != "" {
		listens = append(listens, net.JoinHostPort(ip, "0"))
	}
	for _, l := range listens {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(ctx, bin, "relay", "serve", "--listen", "127.0.0.1:0", "--panel-listen", l,
			"--state-dir", t.TempDir(), "--config-dir", t.TempDir())
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 ||
			!strings.Contains(stderr.String(), "--panel-insecure") || !strings.Contains(stderr.String(), "--tls-cert") {
			t.Errorf("panel on %s: %v, stderr %q", l, err, stderr.String())
		}
		if stdout.Len() != 0 {
			t.Errorf("panel on %s: announced %q before refusing", l, stdout.String())
		}
	}
}

// TestRelayOAuthFlagsNeedThePanel: the OAuth flags without --panel-listen,
// or with a public URL that has a path, refuse to start with one line
// naming the flag, and serve nothing.
func TestRelayOAuthFlagsNeedThePanel(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--panel-public-url", "https://relay.example/panel/"}, "--panel-listen"},
		{[]string{"--oauth-private-clients"}, "--panel-listen"},
		{[]string{"--panel-listen", "127.0.0.1:0", "--public-url", "https://relay.example/relay"}, "--public-url"},
		{[]string{"--panel-listen", "127.0.0.1:0", "--panel-public-url", "relay.example"}, "--panel-public-url"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		args := append([]string{"relay", "serve", "--listen", "127.0.0.1:0", "--state-dir", t.TempDir(), "--config-dir", t.TempDir()}, c.args...)
		cmd := exec.CommandContext(ctx, bin, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 ||
			!strings.Contains(stderr.String(), c.want) || stdout.Len() != 0 {
			t.Errorf("%v: %v, stdout %q, stderr %q", c.args, err, stdout.String(), stderr.String())
		}
	}
}

// TestRelayMetricsOffLoopbackNeedAToken: `relay serve` refuses to serve
// metrics off loopback without --metrics-token (or with one too short to
// resist guessing), saying so and serving nothing; with one, a scrape
// without it, with another or in another scheme gets 401, and with it the
// metrics.
func TestRelayMetricsOffLoopbackNeedAToken(t *testing.T) {
	state, cfg := t.TempDir(), t.TempDir()
	listens := []string{"0.0.0.0:0"}
	if ip := nonLoopbackIP(); ip != "" {
		listens = append(listens, net.JoinHostPort(ip, "0"))
	}
	const token = "metrics-token-5d1e0c7a9b3f4e21"
	for _, l := range listens {
		for _, extra := range [][]string{nil, {"--metrics-token", "short"}} {
			args := append([]string{"relay", "serve", "--listen", "127.0.0.1:0", "--metrics-listen", l, "--state-dir", state, "--config-dir", cfg}, extra...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			cmd := exec.CommandContext(ctx, bin, args...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			cancel()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "--metrics-token") {
				t.Errorf("metrics on %s %v: %v, stderr %q", l, extra, err, stderr.String())
			}
			if strings.Contains(stdout.String(), "listening") || strings.Contains(stderr.String(), "short") {
				t.Errorf("metrics on %s %v: stdout %q, stderr %q", l, extra, stdout.String(), stderr.String())
			}
		}
	}

	relay, _, metricsURL, err := relaytest.ServeMetricsOn(bin, "0.0.0.0:0", "--metrics-token", token,
		"--listen", "127.0.0.1:0", "--state-dir", state, "--config-dir", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Process.Signal(syscall.SIGTERM); relay.Wait() })
	// It announces the wildcard address it listens on; scrape it on loopback.
	u, err := url.Parse(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = net.JoinHostPort("127.0.0.1", u.Port())
	metricsURL = u.String()
	for _, auth := range []string{"", "Bearer ", "Bearer " + token[:len(token)-1], "Bearer " + token + "x", "Basic " + token, token} {
		req, _ := http.NewRequest("GET", metricsURL, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") || strings.Contains(string(body), "commandcore_relay") {
			t.Errorf("Authorization %q: %s %q", auth, resp.Status, body)
		}
	}
	m, err := relaytest.ScrapeToken(metricsURL, token)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Value("commandcore_relay_connected_devices"); !ok {
		t.Fatal("a scrape with the token has no metrics")
	}
}

// nonLoopbackIP is an address of this machine's that is not loopback, or
// "" when it has none.
func nonLoopbackIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}
