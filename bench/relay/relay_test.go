package relaybench

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// device is the name the benchmarks enroll their agent under.
const device = "bench-dev"

// side is one way of reaching the device's tools: `commandcore mcp` over
// stdio, or the relay's /mcp/<device> endpoint.
type side struct {
	name    string
	session *mcp.ClientSession
	// state is the device's state directory, where a job's result.json
	// appears once it is terminal.
	state string
	live  *liveOutput
	// pid is `commandcore mcp`'s, on the stdio side.
	pid int
}

// env is a relay, an enrolled agent linked to it, and a `commandcore mcp`
// beside them, each with its own directories; both sides are connected.
type env struct {
	b                                   *testing.B
	url                                 string
	relayState, agentState, agentConfig string
	stdio, remote                       *side
	// PIDs of the relay, the agent and `commandcore mcp`, for CPU time.
	relayPID, agentPID, mcpPID int
}

// setup starts the relay and the agent, enrolls the device, creates a
// token, opens both sessions and waits until calls through the relay reach
// the device. Everything is torn down when b ends.
func setup(b *testing.B) *env { return setupRelay(b) }

// setupRelay is setup with relayArgs added to relay serve's.
func setupRelay(b *testing.B, relayArgs ...string) *env {
	b.Helper()
	e := &env{b: b, relayState: b.TempDir(), agentState: b.TempDir(), agentConfig: b.TempDir()}
	e.serve(relayArgs...)
	code := e.relayCmd("enroll-code", "--name", device)
	if _, err := command("enroll", "--server", e.url, "--code", code, "--state-dir", e.agentState, "--config-dir", e.agentConfig); err != nil {
		b.Fatalf("enroll: %v", err)
	}
	e.startAgent()
	token := e.relayCmd("token", "create", "--name", "bench", "--devices", device, "--tools", "*")

	e.remote = &side{name: "relay", state: e.agentState, live: &liveOutput{}}
	e.remote.session = connect(b, e.remote.live, testkit.Relayed(e.url+"/mcp/"+device, token))
	e.stdio = setupStdio(b)
	e.mcpPID = e.stdio.pid

	testkit.Eventually(b, 20*time.Second, func() error {
		_, err := e.remote.call("process.jobs", nil, nil)
		if err == nil {
			return nil
		}
		if !strings.Contains(err.Error(), "device_offline") {
			b.Fatalf("the device never came online through the relay: %v", err)
		}
		return fmt.Errorf("the device never came online through the relay: %v", err)
	})
	return e
}

// setupStdio starts `commandcore mcp` with directories of its own and
// opens a session to it.
func setupStdio(b *testing.B) *side {
	state := b.TempDir()
	// Its own config directory: the benchmark must not meet the machine
	// owner's permission ceiling or identity.
	cmd := exec.Command(ccBin, "mcp", "--state-dir", state, "--config-dir", b.TempDir())
	cmd.Stderr = os.Stderr
	s := &side{name: "stdio", state: state, live: &liveOutput{}}
	s.session = connect(b, s.live, testkit.Stdio(cmd))
	s.pid = cmd.Process.Pid
	return s
}

// serve runs `commandcore relay serve` on a free loopback port, with args
// besides.
func (e *env) serve(args ...string) {
	b := e.b
	cmd, url, err := relaytest.Serve(ccBin, append([]string{"--listen", "127.0.0.1:0", "--state-dir", e.relayState, "--config-dir", b.TempDir()}, args...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stop(cmd) })
	e.relayPID = cmd.Process.Pid
	e.url = url
}

func (e *env) startAgent() *exec.Cmd {
	cmd := exec.Command(ccBin, "agent", "--state-dir", e.agentState, "--config-dir", e.agentConfig)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		e.b.Fatal(err)
	}
	e.b.Cleanup(func() { stop(cmd) })
	e.agentPID = cmd.Process.Pid
	return cmd
}

// stop ends a process this benchmark started: SIGTERM, then SIGKILL after
// five seconds.
func stop(cmd *exec.Cmd) {
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// relayCmd runs a relay administration command on the relay's state.
func (e *env) relayCmd(args ...string) string {
	e.b.Helper()
	out, err := command(append(append([]string{"relay"}, args...), "--state-dir", e.relayState)...)
	if err != nil {
		e.b.Fatalf("relay %v: %v", args, err)
	}
	return strings.TrimSpace(out)
}

// command runs commandcore with args and returns its standard output.
func command(args ...string) (string, error) {
	cmd := exec.Command(ccBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// connect opens a session over t whose progress notifications go to live.
func connect(b *testing.B, live *liveOutput, t mcp.Transport) *mcp.ClientSession {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := testkit.Connect(ctx, "bench-relay", t, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { live.add(r.Params) },
	})
	if err != nil {
		b.Fatalf("connect: %v", err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// callRaw invokes a tool with params and returns the SDK's result undecoded.
func (s *side) callRaw(params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return s.session.CallTool(ctx, params)
}

// call invokes a tool that must succeed, returns how long the round trip
// took, and decodes the structured result into out (when not nil).
func (s *side) call(tool string, args any, out any) (time.Duration, error) {
	t0 := time.Now()
	res, err := s.callRaw(&mcp.CallToolParams{Name: tool, Arguments: args})
	d := time.Since(t0)
	return d, testkit.DecodeResult(tool, res, err, out)
}

// interleave runs b.N rounds of every variant, rotating the order per
// round, after one untimed warm-up round, and returns each variant's
// samples.
func interleave(b *testing.B, names []string, sample func(j, i int) (time.Duration, error)) [][]time.Duration {
	b.Helper()
	for j := range names {
		if _, err := sample(j, -1); err != nil {
			b.Fatalf("%s warm-up: %v", names[j], err)
		}
	}
	out := make([][]time.Duration, len(names))
	for i := range b.N {
		for k := range names {
			j := (i + k) % len(names)
			d, err := sample(j, i)
			if err != nil {
				b.Fatalf("%s: %v", names[j], err)
			}
			out[j] = append(out[j], d)
		}
	}
	return out
}

// BenchmarkToolLatency times the round trip of process.jobs and
// system.metrics (no arguments) over stdio and through the relay, from
// CallTool until its result arrives. process.jobs lists an empty state
// directory on both sides. The warm-up round takes system.metrics' first
// 100 ms CPU sample on each side.
func BenchmarkToolLatency(b *testing.B) {
	e := setup(b)
	variants := []struct {
		name, tool string
		s          *side
	}{
		{"stdio-jobs", "process.jobs", e.stdio},
		{"relay-jobs", "process.jobs", e.remote},
		{"stdio-metrics", "system.metrics", e.stdio},
		{"relay-metrics", "system.metrics", e.remote},
	}
	names := make([]string, len(variants))
	for j, v := range variants {
		names[j] = v.name
	}
	samples := interleave(b, names, func(j, _ int) (time.Duration, error) {
		return variants[j].s.call(variants[j].tool, nil, nil)
	})
	b.ReportMetric(0, "ns/op")
	p50 := map[string]time.Duration{}
	for j, v := range variants {
		p50[v.name] = report(b, v.name, samples[j]).P50
	}
	b.ReportMetric(float64(p50["relay-jobs"])/float64(p50["stdio-jobs"]), "jobs-relay/stdio")
	b.ReportMetric(float64(p50["relay-metrics"])/float64(p50["stdio-metrics"]), "metrics-relay/stdio")
}

// startResult is the part of process.start's result the benchmark reads.
type startResult struct {
	ProcessID     string `json:"process_id"`
	FailureDomain string `json:"failure_domain"`
}

// start times process.start of `true` from CallTool until its result
// arrives, then, untimed, waits for the job to end, checks it exited 0 and
// forgets it, so retention never fills and launches never overlap.
func (s *side) start() (time.Duration, error) {
	var res startResult
	d, err := s.call("process.start", map[string]any{"command": "true"}, &res)
	if err != nil {
		return d, err
	}
	if res.FailureDomain != jobmeta.DomainSystemdUnit {
		return d, fmt.Errorf("job ran in failure domain %s, not in a transient unit", res.FailureDomain)
	}
	if err := waitFile(filepath.Join(s.state, "jobs", res.ProcessID, jobmeta.ResultFile), time.Minute); err != nil {
		return d, err
	}
	var rec struct {
		State    string `json:"state"`
		ExitCode *int   `json:"exit_code"`
	}
	if _, err := s.call("process.status", map[string]any{"process_id": res.ProcessID}, &rec); err != nil {
		return d, err
	}
	if rec.State != "exited" || rec.ExitCode == nil || *rec.ExitCode != 0 {
		return d, fmt.Errorf("job %s ended %s (exit %v)", res.ProcessID, rec.State, rec.ExitCode)
	}
	_, err = s.call("process.forget", map[string]any{"process_id": res.ProcessID}, nil)
	return d, err
}

// waitFile polls until path exists or timeout passes.
func waitFile(path string, timeout time.Duration) error {
	for deadline := time.Now().Add(timeout); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %v", path, timeout)
		}
	}
}

// BenchmarkStartLatency times process.start of `true` over stdio and
// through the relay (the job's supervisor has claimed its identity when
// the result arrives).
func BenchmarkStartLatency(b *testing.B) {
	e := setup(b)
	sides := []*side{e.stdio, e.remote}
	samples := interleave(b, []string{"stdio", "relay"}, func(j, _ int) (time.Duration, error) {
		return sides[j].start()
	})
	b.ReportMetric(0, "ns/op")
	st := report(b, "stdio", samples[0])
	rt := report(b, "relay", samples[1])
	b.ReportMetric(float64(rt.P50)/float64(st.P50), "relay/stdio")
	b.ReportMetric(ms(rt.P50-st.P50), "relay-extra-ms")
}

// liveBytes is what the throughput benchmark's command writes to stdout.
const liveBytes = 32 << 20

var liveCommand = fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a`, liveBytes)

// liveOutput collects the progress notifications of one process.run call
// at a time: those whose token is the current one.
type liveOutput struct {
	mu     sync.Mutex
	token  string
	chunks []chunk
	bytes  int64 // delivered message bytes (decoded when base64)
	last   time.Time
	err    error
}

type chunk struct {
	stream      string
	offset, len int64
}

func (l *liveOutput) reset(token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.token, l.chunks, l.bytes, l.last, l.err = token, l.chunks[:0], 0, time.Time{}, nil
}

func (l *liveOutput) add(p *mcp.ProgressNotificationParams) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if fmt.Sprint(p.ProgressToken) != l.token {
		return
	}
	n := int64(len(p.Message))
	enc, _ := p.Meta["encoding"].(string)
	if data, ok := strings.CutPrefix(p.Message, "base64:"); ok && enc == "base64" {
		raw, err := base64.StdEncoding.DecodeString(data)
		if err != nil && l.err == nil {
			l.err = fmt.Errorf("notification with bad base64: %w", err)
		}
		n = int64(len(raw))
	}
	stream, _ := p.Meta["stream"].(string)
	offset, _ := p.Meta["offset"].(float64)
	l.chunks = append(l.chunks, chunk{stream, int64(offset), n})
	l.bytes += n
	l.last = now
}

// delivered returns the message bytes delivered so far, when the last
// notification arrived, and how many there were.
func (l *liveOutput) delivered() (int64, time.Time, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes, l.last, len(l.chunks)
}

// check verifies the chunks of each stream cover it from offset 0 without
// gap or overlap, stdout being liveBytes long and stderr empty.
func (l *liveOutput) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	cs := append([]chunk(nil), l.chunks...)
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].stream != cs[j].stream {
			return cs[i].stream < cs[j].stream
		}
		return cs[i].offset < cs[j].offset
	})
	end := map[string]int64{}
	for _, c := range cs {
		if c.offset != end[c.stream] {
			return fmt.Errorf("%s: chunk at offset %d, expected %d", c.stream, c.offset, end[c.stream])
		}
		end[c.stream] += c.len
	}
	if end["stdout"] != liveBytes || len(end) != 1 {
		return fmt.Errorf("streams delivered %v, want stdout %d", end, int64(liveBytes))
	}
	return nil
}

// runResult is the part of process.run's result the benchmark checks.
type runResult struct {
	ExitCode      *int `json:"exit_code"`
	OutputCapture struct {
		ObservedBytes     int64 `json:"observed_bytes"`
		TransportComplete bool  `json:"transport_complete"`
	} `json:"output_capture"`
}

var errIncomplete = errors.New("live output incomplete")

// runLive makes one process.run of liveCommand with a progress token and
// returns the time from CallTool until both the result and the last byte
// of live output have arrived, and the number of notifications.
func (s *side) runLive(token string) (time.Duration, int, error) {
	s.live.reset(token)
	params := &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{"command": liveCommand, "timeout_ms": 300000}}
	params.SetProgressToken(token)
	t0 := time.Now()
	res, err := s.callRaw(params)
	end := time.Now()
	var out runResult
	if err := testkit.DecodeResult("process.run", res, err, &out); err != nil {
		return 0, 0, err
	}
	// The SDK may hand over the result before it has run every
	// notification handler; wait (briefly) for the rest.
	var n int64
	var last time.Time
	var count int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if n, last, count = s.live.delivered(); n >= liveBytes || time.Now().After(deadline) {
			break
		}
	}
	if n != liveBytes {
		return 0, count, fmt.Errorf("%w: %d of %d bytes in %d notifications", errIncomplete, n, int64(liveBytes), count)
	}
	if err := s.live.check(); err != nil {
		return 0, count, err
	}
	if out.ExitCode == nil || *out.ExitCode != 0 || out.OutputCapture.ObservedBytes != liveBytes || !out.OutputCapture.TransportComplete {
		raw, _ := json.Marshal(res.StructuredContent)
		return 0, count, fmt.Errorf("process.run result: %.400s", raw)
	}
	if last.After(end) {
		end = last
	}
	return end.Sub(t0), count, nil
}

// pipeRun is the floor: the same command with its stdout read by this
// process through a plain pipe, from exec until it exits.
func pipeRun() (time.Duration, error) {
	cmd := exec.Command("/bin/sh", "-c", liveCommand)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	n, err := io.CopyBuffer(io.Discard, out, make([]byte, 64<<10))
	if werr := cmd.Wait(); err == nil {
		err = werr
	}
	d := time.Since(t0)
	if err == nil && n != liveBytes {
		err = fmt.Errorf("pipe delivered %d bytes", n)
	}
	return d, err
}

func mbps(d time.Duration) float64 { return liveBytes / d.Seconds() / 1e6 }

// cpuTime is the user+system CPU time process pid has used (10 ms
// resolution), or this process's own when pid is 0.
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses: state is
	// field 3, utime 14 and stime 15 (in clock ticks, 100 per second).
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	var u, st int64
	fmt.Sscan(f[11], &u)
	fmt.Sscan(f[12], &st)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// BenchmarkRunThroughput streams 32 MiB of live output from process.run as
// progress notifications over stdio and through the relay, and runs the
// same command into a plain pipe as the floor. Each sample is timed from
// the call until both its result and its last notification have arrived;
// every run is checked to have delivered all 32 MiB (message bytes, chunk
// offsets contiguous) and to report transport_complete. MB/s = 10^6 B/s of
// delivered notification bytes, from the median time. It also reports the
// median CPU time per 32 MiB of each process on the path: the server
// (`commandcore mcp`, or the agent), the relay, and the client (this
// process: the go-sdk client session and its notification handler).
func BenchmarkRunThroughput(b *testing.B) {
	e := setup(b)
	var notes [2]int
	names := []string{"stdio", "relay", "pipe"}
	// CPU samples per variant: server, relay, client.
	cpu := map[string][][3]time.Duration{}
	pids := map[string][3]int{"stdio": {e.mcpPID, -1, 0}, "relay": {e.agentPID, e.relayPID, 0}, "pipe": {-1, -1, 0}}
	samples := interleave(b, names, func(j, i int) (time.Duration, error) {
		p := pids[names[j]]
		var before [3]time.Duration
		for k, pid := range p {
			if pid >= 0 {
				before[k] = cpuTime(pid)
			}
		}
		var d time.Duration
		var err error
		switch j {
		case 0, 1:
			s := []*side{e.stdio, e.remote}[j]
			var n int
			d, n, err = s.runLive(fmt.Sprintf("bench-%s-%d", s.name, i))
			notes[j] = n
		default:
			d, err = pipeRun()
		}
		var used [3]time.Duration
		for k, pid := range p {
			if pid >= 0 {
				used[k] = cpuTime(pid) - before[k]
			}
		}
		if i >= 0 {
			cpu[names[j]] = append(cpu[names[j]], used)
		}
		return d, err
	})
	b.ReportMetric(0, "ns/op")
	rate := map[string]float64{}
	for j, name := range names {
		st := summarize(samples[j])
		rate[name] = mbps(st.P50)
		b.ReportMetric(rate[name], name+"-MB/s")
		b.ReportMetric(mbps(st.Max), name+"-min-MB/s")
		b.ReportMetric(mbps(st.Min), name+"-max-MB/s")
		for k, what := range []string{"server", "relay", "client"} {
			if pids[name][k] < 0 {
				continue
			}
			var ds []time.Duration
			for _, u := range cpu[name] {
				ds = append(ds, u[k])
			}
			b.ReportMetric(ms(summarize(ds).P50), name+"-"+what+"-cpu-ms")
		}
	}
	b.ReportMetric(rate["relay"]/rate["stdio"], "relay/stdio")
	b.ReportMetric(float64(notes[0]), "stdio-notifications")
	b.ReportMetric(float64(notes[1]), "relay-notifications")
}
