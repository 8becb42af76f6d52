package relaybench

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
)

// pageBytes returns the bytes of one stream's page.
func pageBytes(p jobs.StreamPage) ([]byte, error) {
	switch p.Encoding {
	case "utf-8":
		return []byte(p.Data), nil
	case "base64":
		return base64.StdEncoding.DecodeString(p.Data)
	}
	return nil, fmt.Errorf("page encoding %q", p.Encoding)
}

// startInteractive starts command as a job with a stdin pipe and returns
// its process_id and its supervisor's PID.
func (s *side) startInteractive(command string) (string, int, error) {
	var res startResult
	if _, err := s.call("process.start", map[string]any{"command": command, "stdin": true}, &res); err != nil {
		return "", 0, err
	}
	if res.FailureDomain != jobmeta.DomainSystemdUnit {
		return res.ProcessID, 0, fmt.Errorf("job ran in failure domain %s, not in a transient unit", res.FailureDomain)
	}
	var rec struct {
		Identity *struct {
			Supervisor struct {
				PID int `json:"pid"`
			} `json:"supervisor"`
		} `json:"identity"`
	}
	if _, err := s.call("process.status", map[string]any{"process_id": res.ProcessID}, &rec); err != nil {
		return res.ProcessID, 0, err
	}
	if rec.Identity == nil {
		return res.ProcessID, 0, fmt.Errorf("job %s has no supervisor identity", res.ProcessID)
	}
	return res.ProcessID, rec.Identity.Supervisor.PID, nil
}

// end stops job id, waits until it is terminal and forgets it, so that
// nothing writes into the state directory when the benchmark removes it.
func (s *side) end(id string) {
	s.call("process.stop", map[string]any{"process_id": id}, nil)
	waitFile(filepath.Join(s.state, "jobs", id, jobmeta.ResultFile), time.Minute)
	s.call("process.forget", map[string]any{"process_id": id}, nil)
}

// input calls process.input and checks that the job took all of data.
func (s *side) input(args map[string]any, n int) (jobs.InputResult, time.Duration, error) {
	var res jobs.InputResult
	d, err := s.call("process.input", args, &res)
	if err == nil && res.AcceptedBytes != n {
		err = fmt.Errorf("process.input accepted %d of %d bytes", res.AcceptedBytes, n)
	}
	return res, d, err
}

// echoQuiet is the one-call round trip: process.input with wait_ms, which
// returns once the job's output has paused for the quiet period (100 ms).
func (s *side) echoQuiet(id, line string) (time.Duration, error) {
	res, d, err := s.input(map[string]any{"process_id": id, "data": line, "wait_ms": 10000}, len(line))
	if err != nil {
		return d, err
	}
	if res.Output == nil {
		return d, fmt.Errorf("process.input with wait_ms returned no output")
	}
	got, err := pageBytes(res.Output.Stdout)
	if err == nil && string(got) != line {
		err = fmt.Errorf("echo %q, want %q", got, line)
	}
	return d, err
}

// echoPoll is the round trip without the quiet period: process.input
// without wait_ms, then process.output with wait_ms from the offset the
// input reported, which returns as soon as there are bytes past it. It
// also returns how long the process.input call alone took.
func (s *side) echoPoll(id, line string) (time.Duration, time.Duration, error) {
	t0 := time.Now()
	res, inputOnly, err := s.input(map[string]any{"process_id": id, "data": line}, len(line))
	if err != nil {
		return 0, 0, err
	}
	var got []byte
	for off := res.StdoutOffset; len(got) < len(line); {
		var out jobs.Output
		if _, err := s.call("process.output", map[string]any{"process_id": id, "stdout_offset": off, "wait_ms": 10000}, &out); err != nil {
			return 0, 0, err
		}
		data, err := pageBytes(out.Stdout)
		if err != nil {
			return 0, 0, err
		}
		if len(data) == 0 && out.Terminal {
			return 0, 0, fmt.Errorf("the cat job ended")
		}
		got = append(got, data...)
		off = out.Stdout.NextOffset
	}
	d := time.Since(t0)
	if string(got) != line {
		return d, inputOnly, fmt.Errorf("echo %q, want %q", got, line)
	}
	return d, inputOnly, nil
}

// pipeCat is the floor: a `cat` child of this process with plain pipes as
// its stdin and stdout.
type pipeCat struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out io.Reader
	buf []byte
}

func startPipeCat(b *testing.B) *pipeCat {
	b.Helper()
	cmd := exec.Command("cat")
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close(); cmd.Wait() })
	return &pipeCat{cmd: cmd, in: in, out: out, buf: make([]byte, 4096)}
}

// echo writes line and reads it back.
func (p *pipeCat) echo(line string) (time.Duration, error) {
	t0 := time.Now()
	if _, err := io.WriteString(p.in, line); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(p.out, p.buf[:len(line)]); err != nil {
		return 0, err
	}
	d := time.Since(t0)
	if string(p.buf[:len(line)]) != line {
		return d, fmt.Errorf("pipe echo %q, want %q", p.buf[:len(line)], line)
	}
	return d, nil
}

// BenchmarkInputRoundTrip times one line sent to a `cat` job until its
// echo is back, over stdio and through the relay, in two ways:
//
//	*-quiet  one process.input call with wait_ms: it returns after the
//	         echo and then 100 ms without output (limits.InputQuietPeriod),
//	         so this includes the quiet period by design
//	*-poll   process.input without wait_ms, then process.output with
//	         wait_ms from the reported offset, which returns as soon as the
//	         echo is captured (the service re-reads every 20 ms)
//
// and the floor, a line written to a plain pipe into a `cat` child and
// read back from its stdout pipe. Each side has one long-lived `cat` job
// (stdin: true), started untimed. *-input-only is the process.input call
// of the poll variant alone: the input delivered and acknowledged.
func BenchmarkInputRoundTrip(b *testing.B) {
	e := setup(b)
	ids := map[*side]string{}
	for _, s := range []*side{e.stdio, e.remote} {
		id, _, err := s.startInteractive("exec cat")
		if err != nil {
			b.Fatal(err)
		}
		ids[s] = id
		b.Cleanup(func() { s.end(id) })
	}
	pipe := startPipeCat(b)
	names := []string{"stdio-quiet", "relay-quiet", "stdio-poll", "relay-poll", "pipe"}
	inputOnly := map[string][]time.Duration{}
	samples := interleave(b, names, func(j, i int) (time.Duration, error) {
		line := fmt.Sprintf("round-trip %s %d\n", names[j], i)
		switch names[j] {
		case "stdio-quiet":
			return e.stdio.echoQuiet(ids[e.stdio], line)
		case "relay-quiet":
			return e.remote.echoQuiet(ids[e.remote], line)
		case "stdio-poll", "relay-poll":
			s := map[string]*side{"stdio-poll": e.stdio, "relay-poll": e.remote}[names[j]]
			d, in, err := s.echoPoll(ids[s], line)
			if i >= 0 {
				inputOnly[s.name] = append(inputOnly[s.name], in)
			}
			return d, err
		}
		return pipe.echo(line)
	})
	b.ReportMetric(0, "ns/op")
	p50 := map[string]time.Duration{}
	for j, name := range names {
		p50[name] = report(b, name, samples[j]).P50
		b.ReportMetric(ms(summarize(samples[j]).Min), name+"-min-ms")
	}
	for _, name := range []string{"stdio", "relay"} {
		st := report(b, name+"-input-only", inputOnly[name])
		b.ReportMetric(ms(st.Min), name+"-input-only-min-ms")
	}
	b.ReportMetric(float64(p50["stdio-poll"])/float64(p50["pipe"]), "stdio-poll/pipe")
}

// inputBytes is what the throughput benchmark sends, in calls of
// inputChunk bytes (the contract's bound per call, after decoding).
const (
	inputBytes = 64 << 20
	inputChunk = 64 << 10
)

// Payloads of one call: text (63 letters and a newline, repeated) as a
// utf-8 string, and random bytes as base64 (87,384 characters that decode
// to 64 KiB: the bound applies to the decoded bytes).
var (
	textChunk   = strings.Repeat(strings.Repeat("a", 63)+"\n", inputChunk/64)
	base64Chunk = func() string {
		raw := make([]byte, inputChunk)
		r := rand.NewChaCha8([32]byte{1})
		r.Read(raw)
		return base64.StdEncoding.EncodeToString(raw)
	}()
)

// pump starts `wc -c` as a job with stdin (untimed), then sends it
// inputBytes in process.input calls of inputChunk bytes, then eof, and
// pages its stdout (process.output with wait_ms) until wc's count is
// there, which it checks. The span is timed from the first call until
// the count arrives. It returns the supervisor's CPU time over the data
// calls too; afterwards, untimed, it waits for the job to end and
// forgets it.
func (s *side) pump(encoding string) (time.Duration, time.Duration, error) {
	id, sup, err := s.startInteractive("wc -c")
	if err != nil {
		return 0, 0, err
	}
	data := textChunk
	if encoding == "base64" {
		data = base64Chunk
	}
	args := map[string]any{"process_id": id, "data": data, "encoding": encoding}
	supBefore := cpuTime(sup)
	t0 := time.Now()
	for range inputBytes / inputChunk {
		if _, _, err := s.input(args, inputChunk); err != nil {
			return 0, 0, err
		}
	}
	supCPU := cpuTime(sup) - supBefore
	if _, _, err := s.input(map[string]any{"process_id": id, "eof": true}, 0); err != nil {
		return 0, 0, err
	}
	var got []byte
	var off int64
	for !bytes.HasSuffix(got, []byte("\n")) {
		var out jobs.Output
		if _, err := s.call("process.output", map[string]any{"process_id": id, "stdout_offset": off, "wait_ms": 10000}, &out); err != nil {
			return 0, 0, err
		}
		page, err := pageBytes(out.Stdout)
		if err != nil {
			return 0, 0, err
		}
		if len(page) == 0 && out.Terminal {
			break
		}
		got = append(got, page...)
		off = out.Stdout.NextOffset
	}
	d := time.Since(t0)
	if n, err := strconv.Atoi(strings.TrimSpace(string(got))); err != nil || n != inputBytes {
		return d, supCPU, fmt.Errorf("wc -c counted %q, want %d", got, inputBytes)
	}
	if err := waitFile(filepath.Join(s.state, "jobs", id, jobmeta.ResultFile), time.Minute); err != nil {
		return d, supCPU, err
	}
	_, err = s.call("process.forget", map[string]any{"process_id": id}, nil)
	return d, supCPU, err
}

// pipeWC is the floor: inputBytes written in inputChunk writes to a plain
// pipe into a `wc -c` child (started untimed), timed from the first write
// until its count has been read.
func pipeWC() (time.Duration, error) {
	cmd := exec.Command("wc", "-c")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	chunk := []byte(textChunk)
	t0 := time.Now()
	for range inputBytes / inputChunk {
		if _, err := in.Write(chunk); err != nil {
			return 0, err
		}
	}
	in.Close()
	got, err := io.ReadAll(out)
	d := time.Since(t0)
	if werr := cmd.Wait(); err == nil {
		err = werr
	}
	if n, aerr := strconv.Atoi(strings.TrimSpace(string(got))); err == nil && (aerr != nil || n != inputBytes) {
		err = fmt.Errorf("wc -c counted %q, want %d", got, inputBytes)
	}
	return d, err
}

// BenchmarkInputThroughput sends 64 MiB through process.input (calls of
// 64 KiB, the contract's bound) into a `wc -c` job, checks the count, and
// compares it with a plain pipe into `wc -c` in the same run. Variants:
// utf-8 text and base64 of random bytes, over stdio and through the
// relay. MB/s = 10^6 B/s of input bytes from the median time. It also
// reports median CPU per 64 MiB of the server (`commandcore mcp`, or the
// agent), the relay, the job's supervisor and the client (this process).
func BenchmarkInputThroughput(b *testing.B) {
	e := setup(b)
	type variant struct {
		name, encoding string
		s              *side
		server         int
	}
	variants := []variant{
		{"stdio-utf8", "utf-8", e.stdio, e.mcpPID},
		{"stdio-base64", "base64", e.stdio, e.mcpPID},
		{"relay-utf8", "utf-8", e.remote, e.agentPID},
		{"relay-base64", "base64", e.remote, e.agentPID},
		{"pipe", "", nil, -1},
	}
	names := make([]string, len(variants))
	for j, v := range variants {
		names[j] = v.name
	}
	cpu := map[string]map[string][]time.Duration{}
	samples := interleave(b, names, func(j, i int) (time.Duration, error) {
		v := variants[j]
		pids := map[string]int{"client": 0}
		if v.s != nil {
			pids["server"] = v.server
		}
		if v.s == e.remote {
			pids["relay"] = e.relayPID
		}
		before := map[string]time.Duration{}
		for k, pid := range pids {
			before[k] = cpuTime(pid)
		}
		var d, sup time.Duration
		var err error
		if v.s == nil {
			d, err = pipeWC()
		} else {
			d, sup, err = v.s.pump(v.encoding)
		}
		if i >= 0 {
			if cpu[v.name] == nil {
				cpu[v.name] = map[string][]time.Duration{}
			}
			for k, pid := range pids {
				cpu[v.name][k] = append(cpu[v.name][k], cpuTime(pid)-before[k])
			}
			if v.s != nil {
				cpu[v.name]["supervisor"] = append(cpu[v.name]["supervisor"], sup)
			}
		}
		return d, err
	})
	b.ReportMetric(0, "ns/op")
	rate := func(d time.Duration) float64 { return inputBytes / d.Seconds() / 1e6 }
	p50 := map[string]time.Duration{}
	for j, name := range names {
		st := summarize(samples[j])
		p50[name] = st.P50
		b.ReportMetric(rate(st.P50), name+"-MB/s")
		b.ReportMetric(rate(st.Max), name+"-min-MB/s")
		b.ReportMetric(rate(st.Min), name+"-max-MB/s")
		for k, ds := range cpu[name] {
			b.ReportMetric(ms(summarize(ds).P50), name+"-"+k+"-cpu-ms")
		}
	}
	for _, v := range variants[:4] {
		b.ReportMetric(float64(p50["pipe"])/float64(p50[v.name]), v.name+"/pipe")
	}
}
