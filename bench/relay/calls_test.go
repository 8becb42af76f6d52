package relaybench

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/pgtest"
	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/testkit"
)

// The calls benchmark's knobs. How long the clients call is the flag
// -calls.duration, or else CALLS_DURATION, or else 20 s (a short run; the
// acceptance run is five minutes). How many clients call at once is
// CALLS_CLIENTS (default 64). The postgres runs need PostgreSQL's server
// binaries (pgtest finds them; without them they are skipped). Not in
// bench/run.sh, which runs ./bench alone; run it as:
//
//	eval "$(go run ./internal/systemdtest/cmd/usermgr env)"
//	go test ./bench/relay -run '^$' -bench 'RelayCalls' -benchtime 1x -v
//	go test ./bench/relay -run '^$' -bench 'RelayCalls' -benchtime 1x -v -timeout 30m -calls.duration 5m
//	CALLS_DURATION=5m go test ./bench/relay -run '^$' -bench 'RelayCalls/sqlite/static' -benchtime 1x -v -timeout 30m
var (
	callsDuration = flag.Duration("calls.duration", envDuration("CALLS_DURATION", 20*time.Second),
		"how long BenchmarkRelayCalls' clients call (also CALLS_DURATION)")
	callsClients = envInt("CALLS_CLIENTS", 64)
)

// BenchmarkRelayCalls measures what one relay carries for calls, not for
// idle links: CALLS_CLIENTS MCP clients (the go-sdk client over
// Streamable HTTP on loopback, each with its own session and its own
// connections, as separate programs would have) call one linked agent's
// tools through one relay, back to back, for -calls.duration. Each client
// alternates process.jobs and process.status of a job (`true`) started
// once before. It runs per state engine (sqlite: the relay's state
// directory; postgres: a throw-away PostgreSQL cluster, pgtest, one
// replica and no NATS) and per credential (static: a client token from
// `relay token create`; oauth: an OAuth connection's access token,
// made in the relay's state as the consent page makes it, see
// oauthAccess), both credentials on the same relay, the panel on.
//
// It reports calls/s (answered calls over the window), the p50, p99 and
// p999 of a call's round trip (CallTool until its result), the failed
// calls (protocol errors and error results; each distinct first line is
// logged with its count) and the relay's CPU time per call (utime+stime
// from /proc over the window, divided by every call made in it), the
// agent's and the clients' (this process) beside it, and
// calls-per-relay-core-s, the calls over the relay's CPU seconds: what one
// relay core carries when the relay is the bottleneck (on a small machine
// the agent and the clients, which share it, are). The relay is the
// shipped binary in a process of its own, so its CPU time is its alone. Run it with -benchtime 1x: every
// number comes from one pass, whatever b.N is.
func BenchmarkRelayCalls(b *testing.B) {
	for _, engine := range []string{"sqlite", "postgres"} {
		b.Run(engine, func(b *testing.B) {
			r := setupCalls(b, engine)
			creds := []struct{ name, token string }{
				{"static", r.admin("token", "create", "--name", "bench", "--devices", device, "--tools", "*")},
				{"oauth", r.oauthToken()},
			}
			for _, c := range creds {
				b.Run(c.name, func(b *testing.B) { r.measure(b, c.token) })
			}
		})
	}
}

// callsRelay is a relay on one state engine with the benchmark's agent
// linked to it.
type callsRelay struct {
	*env
	// state names the relay's state to its CLI: --state-dir DIR or
	// --database URL.
	state []string
	// open opens the relay's state in this process.
	open func() (*store.Store, error)
	// relayLog and agentLog are where the relay's and the agent's
	// standard error go.
	relayLog, agentLog string
}

// setupCalls starts the relay (state on engine, the panel on so that it
// is an authorization server) and the agent, and enrolls the device.
func setupCalls(b *testing.B, engine string) *callsRelay {
	b.Helper()
	e := &env{b: b, relayState: b.TempDir(), agentState: b.TempDir(), agentConfig: b.TempDir()}
	r := &callsRelay{env: e, state: []string{"--state-dir", e.relayState}, open: func() (*store.Store, error) { return store.Open(e.relayState) }}
	var args []string
	if engine == "postgres" {
		db, err := pgtest.StartT(b).CreateDatabase("relaycalls")
		if err != nil {
			b.Fatal(err)
		}
		r.state = []string{"--database", db}
		r.open = func() (*store.Store, error) { return store.OpenPostgres(db) }
		args = append(args, r.state...)
	}
	// The relay and the agent log every call: to files, which are
	// read back only for failed calls, not to the terminal.
	logs := b.TempDir()
	r.relayLog, r.agentLog = filepath.Join(logs, "relay.log"), filepath.Join(logs, "agent.log")
	relayLog := createFile(b, r.relayLog)
	cmd, url, _, err := relaytest.ServePanelLogged(ccBin, relayLog,
		append([]string{"--listen", "127.0.0.1:0", "--state-dir", e.relayState, "--config-dir", b.TempDir()}, args...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stop(cmd) })
	e.relayPID, e.url = cmd.Process.Pid, url

	code := r.admin("enroll-code", "--name", device)
	if _, err := command("enroll", "--server", e.url, "--code", code, "--state-dir", e.agentState, "--config-dir", e.agentConfig); err != nil {
		b.Fatalf("enroll: %v", err)
	}
	agent := exec.Command(ccBin, "agent", "--state-dir", e.agentState, "--config-dir", e.agentConfig)
	agent.Stderr = createFile(b, r.agentLog)
	if err := agent.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stop(agent) })
	e.agentPID = agent.Process.Pid
	return r
}

// createFile creates path, closed when b ends.
func createFile(b *testing.B, path string) *os.File {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// startJob starts the job (`true`) that s's process.status calls ask
// about, once calls through s reach the device, and returns its ID once it
// has ended. Jobs are their owner's: each credential starts its own.
func (r *callsRelay) startJob(b *testing.B, s *side) string {
	testkit.Eventually(b, 20*time.Second, func() error {
		_, err := s.call("process.jobs", nil, nil)
		return err
	})
	var res startResult
	if _, err := s.call("process.start", map[string]any{"command": "true"}, &res); err != nil {
		b.Fatal(err)
	}
	if err := waitFile(filepath.Join(r.agentState, "jobs", res.ProcessID, jobmeta.ResultFile), time.Minute); err != nil {
		b.Fatal(err)
	}
	return res.ProcessID
}

// failedLines logs the lines of the log at path that mention a failure,
// up to max of them.
func failedLines(b *testing.B, what, path string, max int) {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Log(err)
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		if max > 0 && strings.Contains(line, "failed") {
			b.Logf("%s: %s", what, line)
			max--
		}
	}
}

// admin runs a relay administration command on the relay's state.
func (r *callsRelay) admin(args ...string) string {
	r.b.Helper()
	out, err := command(append(append([]string{"relay"}, args...), r.state...)...)
	if err != nil {
		r.b.Fatalf("relay %v: %v", args, err)
	}
	return strings.TrimSpace(out)
}

// oauthToken is an OAuth connection's access token for the device.
func (r *callsRelay) oauthToken() string {
	st, err := r.open()
	if err != nil {
		r.b.Fatal(err)
	}
	defer st.Close()
	return oauthAccess(r.b, st, r.url+"/mcp/"+device)
}

// side opens a session to the device through the relay with token, over
// an HTTP transport of its own: its connections are its alone, as those
// of a client in a process of its own are.
func (r *callsRelay) side(b *testing.B, name, token string) *side {
	b.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	b.Cleanup(tr.CloseIdleConnections)
	s := &side{name: name, state: r.agentState, live: &liveOutput{}}
	s.session = connect(b, s.live, &mcp.StreamableClientTransport{Endpoint: r.url + "/mcp/" + device,
		HTTPClient: &http.Client{Transport: bearer{token, tr}}})
	return s
}

// bearer adds a bearer token to every request sent through next.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (t bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+t.token)
	return t.next.RoundTrip(req)
}

// callFailure is one kind of failed call: its first line, how many and
// the first one's time into the window.
type callFailure struct {
	msg   string
	count int
	first time.Duration
}

// measure opens callsClients sessions with token, makes one untimed call
// of each tool on each, then lets them all call for callsDuration and
// reports.
func (r *callsRelay) measure(b *testing.B, token string) {
	sides := make([]*side, callsClients)
	for i := range sides {
		sides[i] = r.side(b, fmt.Sprintf("client%d", i), token)
	}
	status := map[string]any{"process_id": r.startJob(b, sides[0])}
	tools := []struct {
		name string
		args any
	}{{"process.jobs", nil}, {"process.status", status}}
	for _, s := range sides {
		for _, t := range tools {
			if _, err := s.call(t.name, t.args, nil); err != nil {
				b.Fatalf("%s warm-up: %v", t.name, err)
			}
		}
	}

	var (
		mu       sync.Mutex
		samples  []time.Duration
		failures = map[string]*callFailure{}
		failed   int
		wg       sync.WaitGroup
	)
	relay0, agent0, client0 := cpuTime(r.relayPID), cpuTime(r.agentPID), cpuTime(0)
	t0 := time.Now()
	deadline := t0.Add(*callsDuration)
	for i, s := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			// Clients start on different tools, so both are in flight
			// throughout.
			for k := i; time.Now().Before(deadline); k++ {
				t := tools[k%2]
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				c0 := time.Now()
				res, err := s.session.CallTool(ctx, &mcp.CallToolParams{Name: t.name, Arguments: t.args})
				d := time.Since(c0)
				cancel()
				if err = testkit.DecodeResult(t.name, res, err, nil); err == nil {
					mine = append(mine, d)
					continue
				}
				msg, _, _ := strings.Cut(err.Error(), "\n")
				mu.Lock()
				failed++
				if f := failures[msg]; f != nil {
					f.count++
				} else {
					failures[msg] = &callFailure{msg: msg, count: 1, first: c0.Sub(t0)}
				}
				mu.Unlock()
			}
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	window := time.Since(t0)
	relayCPU, agentCPU, clientCPU := cpuTime(r.relayPID)-relay0, cpuTime(r.agentPID)-agent0, cpuTime(0)-client0

	calls := len(samples) + failed
	fs := make([]*callFailure, 0, len(failures))
	for _, f := range failures {
		fs = append(fs, f)
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].first < fs[j].first })
	for _, f := range fs {
		b.Logf("failed %d times, first at %v: %s", f.count, f.first.Round(time.Millisecond), f.msg)
	}
	if failed > 0 {
		failedLines(b, "relay", r.relayLog, 20)
		failedLines(b, "agent", r.agentLog, 20)
	}
	st := summarize(samples)
	p999 := time.Duration(0)
	if n := len(samples); n > 0 {
		sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
		p999 = samples[int(math.Ceil(0.999*float64(n)))-1]
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(len(samples))/window.Seconds(), "calls/s")
	b.ReportMetric(ms(st.P50), "p50-ms")
	b.ReportMetric(ms(st.P99), "p99-ms")
	b.ReportMetric(ms(p999), "p999-ms")
	b.ReportMetric(float64(failed), "failed-calls")
	if calls > 0 {
		b.ReportMetric(ms(relayCPU)/float64(calls), "relay-cpu-ms-per-call")
		b.ReportMetric(ms(agentCPU)/float64(calls), "agent-cpu-ms-per-call")
		b.ReportMetric(ms(clientCPU)/float64(calls), "client-cpu-ms-per-call")
	}
	if relayCPU > 0 {
		// What one relay core would carry were the relay the bottleneck.
		b.ReportMetric(float64(calls)/relayCPU.Seconds(), "calls-per-relay-core-s")
	}
	b.ReportMetric(100*relayCPU.Seconds()/window.Seconds(), "relay-cpu-pct")
	b.Logf("%d clients for %v: %d calls (%d failed), %.0f calls/s, p50 %.2f ms p99 %.2f ms p999 %.2f ms, relay CPU %v (%.1f %% of a core), agent CPU %v, clients' CPU %v",
		len(sides), window.Round(time.Millisecond), calls, failed, float64(len(samples))/window.Seconds(),
		ms(st.P50), ms(st.P99), ms(p999), relayCPU, 100*relayCPU.Seconds()/window.Seconds(), agentCPU, clientCPU)
}
