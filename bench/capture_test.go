package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/principal"
)

// captureBytes is what the capture benchmarks push through stdout: 2 GiB.
const captureBytes = 2 << 30

// bigJob is the job of the capture benchmarks (the brief's producer; GNU
// head copies in 8 KiB writes). ddJob writes the same bytes in 1 MiB
// writes, a faster producer that leaves the consumer as the bottleneck.
var (
	bigJob = fmt.Sprintf("head -c %d /dev/zero", captureBytes)
	ddJob  = fmt.Sprintf("dd if=/dev/zero bs=1M count=%d status=none", captureBytes>>20)
)

// bigRun is one captured run.
type bigRun struct {
	d      time.Duration // process.start call until terminal
	rec    record        // the final record
	peak   memPeak       // when memory was sampled
	supCPU time.Duration // the supervisor's own user+system CPU time
}

// runBig launches command over MCP and waits until it is terminal (its
// result.json exists, polled every 500 µs or, when memory is sampled, every
// `sample`), reading the supervisor's CPU time from /proc/PID/stat as it
// goes. The supervisor's PID comes from its identity claim (identity.json;
// process.status reports the same as identity.supervisor.pid).
func runBig(b *testing.B, c *mcpClient, command string, sample time.Duration) bigRun {
	b.Helper()
	var run bigRun
	t0 := time.Now()
	var res jobs.StartResult
	if err := c.call("process.start", map[string]any{"command": command}, &res); err != nil {
		b.Fatal(err)
	}
	if res.FailureDomain != jobmeta.DomainSystemdUnit {
		b.Fatal(errNotSystemd)
	}
	dir := jobDir(c.state, res.ProcessID)
	result := filepath.Join(dir, jobmeta.ResultFile)
	ident, err := jobmeta.Read[jobmeta.Claim](filepath.Join(dir, jobmeta.ClaimFile))
	if err != nil {
		b.Fatal(err)
	}
	pid := ident.Supervisor.PID
	if sample > 0 {
		run.peak = sampleMemory(pid, result, sample)
	} else {
		for {
			if _, err := os.Stat(result); err == nil {
				break
			}
			if cpu, err := cpuTime(pid); err == nil {
				run.supCPU = cpu
			}
			if time.Since(t0) > 5*time.Minute {
				b.Fatal("job did not end")
			}
			time.Sleep(500 * time.Microsecond)
		}
	}
	run.d = time.Since(t0)
	// The supervisor writes result.json a moment before it exits, and an
	// end in the job's directory is believed only once it has.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if err := c.call("process.status", map[string]any{"process_id": res.ProcessID}, &run.rec); err != nil {
			b.Fatal(err)
		}
		if run.rec.Terminal || time.Now().After(deadline) {
			break
		}
	}
	rec := run.rec
	out := rec.Capture.Stdout
	if rec.State != "exited" || rec.ExitCode == nil || *rec.ExitCode != 0 || out.ObservedBytes == nil || *out.ObservedBytes != captureBytes || !out.Complete {
		b.Fatalf("%q ended %s exit %v, stdout observed %v complete %v", command, rec.State, rec.ExitCode, out.ObservedBytes, out.Complete)
	}
	if rec.Identity == nil || rec.Identity.Supervisor.PID != pid {
		b.Fatalf("process.status names another supervisor than identity.json")
	}
	if err := c.call("process.forget", map[string]any{"process_id": res.ProcessID}, nil); err != nil {
		b.Fatal(err)
	}
	return run
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's CPU times (100 on
// every Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// cpuTime returns a process's own user+system CPU time (/proc/PID/stat
// fields 14 and 15).
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat")
	}
	f := strings.Fields(string(data[i+1:])) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed stat")
	}
	return time.Duration(ut+st) * clockTick, nil
}

// BenchmarkCaptureMCP2GiB measures capture throughput: a job writing 2 GiB
// of zeros to stdout (bigJob), timed from the process.start call until the
// job is terminal (capture sealed, result published). MB/s is 10^6 bytes/s
// over that span (mean of b.N runs); job-MB/s is over the supervisor's own
// span from the shell's start to its exit (started_at to completed_at).
func BenchmarkCaptureMCP2GiB(b *testing.B) {
	c := newMCP(b, stateDir(b))
	b.SetBytes(captureBytes)
	var spans []time.Duration
	for range b.N {
		rec := runBig(b, c, bigJob, 0).rec
		if rec.StartedAt != nil && rec.CompletedAt != nil {
			spans = append(spans, rec.CompletedAt.Sub(*rec.StartedAt))
		}
	}
	b.StopTimer()
	if len(spans) > 0 {
		b.ReportMetric(mbps(summarize(spans).P50), "job-MB/s")
	}
}

// BenchmarkPipeBaseline2GiB is the same 2 GiB through a plain pipe into
// cat, from exec of the shell until it exits.
func BenchmarkPipeBaseline2GiB(b *testing.B) {
	b.SetBytes(captureBytes)
	for range b.N {
		mustPipe(b, bigJob)
	}
}

// pipeRun times `command | cat > /dev/null` from exec of the shell to exit
// and returns cat's user+system CPU time too (GNU time, 10 ms resolution).
func pipeRun(command string) (time.Duration, time.Duration, error) {
	f, err := os.CreateTemp("", "commandcore-bench-time")
	if err != nil {
		return 0, 0, err
	}
	f.Close()
	defer os.Remove(f.Name())
	cmd := exec.Command("/bin/bash", "-c", command+` | /usr/bin/time -f "%U %S" -o "$TIMEFILE" cat > /dev/null`)
	cmd.Env = append(os.Environ(), "TIMEFILE="+f.Name())
	cmd.Stderr = os.Stderr
	t0 := time.Now()
	err = cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return d, 0, err
	}
	data, err := os.ReadFile(f.Name())
	if err != nil {
		return d, 0, err
	}
	var u, sys float64
	if _, err := fmt.Sscanf(string(data), "%f %f", &u, &sys); err != nil {
		return d, 0, fmt.Errorf("GNU time output %q: %w", data, err)
	}
	return d, time.Duration((u + sys) * float64(time.Second)), nil
}

func mbps(d time.Duration) float64 { return captureBytes / d.Seconds() / 1e6 }

// BenchmarkCaptureCompare interleaves, per iteration, a captured job and its
// plain-pipe baseline for both producers (head: the brief's; dd: 1 MiB
// writes), so background load hits both alike. It reports the median MB/s
// of each, the ratios captured/pipe (target >= 0.9 for both producers), and
// the consumer's median CPU time: the supervisor's own for captured runs,
// cat's for the pipe (CPU time is much less sensitive to load from elsewhere
// than wall time), with its ratio supervisor/cat (target <= 1.2). The jobs
// run at the default niceness; CAPTURE_NICE=N writes {"nice": N} to the
// state directory's job-resources.json first (the pipe runs at the
// benchmark's own).
func BenchmarkCaptureCompare(b *testing.B) {
	state := stateDir(b)
	writeNice(b, state, niceFromEnv(b, "CAPTURE_NICE"))
	c := newMCP(b, state)
	type sample struct{ d, cpu time.Duration }
	captured := func(command string) func() sample {
		return func() sample { r := runBig(b, c, command, 0); return sample{r.d, r.supCPU} }
	}
	piped := func(command string) func() sample {
		return func() sample {
			d, cpu, err := pipeRun(command)
			if err != nil {
				b.Fatal(err)
			}
			return sample{d, cpu}
		}
	}
	runs := []struct {
		name string
		run  func() sample
	}{
		{"mcp-head", captured(bigJob)},
		{"pipe-head", piped(bigJob)},
		{"mcp-dd", captured(ddJob)},
		{"pipe-dd", piped(ddJob)},
	}
	wall := make([][]time.Duration, len(runs))
	cpu := make([][]time.Duration, len(runs))
	for i := range b.N {
		for k := range runs {
			j := (i + k) % len(runs)
			s := runs[j].run()
			wall[j], cpu[j] = append(wall[j], s.d), append(cpu[j], s.cpu)
		}
	}
	b.ReportMetric(0, "ns/op")
	rate, consumer := map[string]float64{}, map[string]float64{}
	for j, r := range runs {
		rate[r.name] = mbps(summarize(wall[j]).P50)
		consumer[r.name] = ms(summarize(cpu[j]).P50)
		b.ReportMetric(rate[r.name], r.name+"-MB/s")
		b.ReportMetric(consumer[r.name], r.name+"-consumer-cpu-ms")
	}
	for _, p := range []string{"head", "dd"} {
		b.ReportMetric(rate["mcp-"+p]/rate["pipe-"+p], p+"-captured/pipe")
		b.ReportMetric(consumer["mcp-"+p]/consumer["pipe-"+p], p+"-cpu-supervisor/cat")
	}
}

// BenchmarkCaptureSupervisors compares ways of running the fast producer
// (ddJob), interleaved per iteration, each timed from the start request
// until terminal: over MCP (commandcore mcp re-executing itself), through
// jobs.Service in this process with commandcore, the minisup prototype and
// minisup with GOMAXPROCS=1 as the supervisor, and the plain pipe. It
// reports the median MB/s of each.
func BenchmarkCaptureSupervisors(b *testing.B) {
	c := newMCP(b, stateDir(b))
	runs := []struct {
		name string
		run  func() time.Duration
	}{
		{"mcp", func() time.Duration { return runBig(b, c, ddJob, 0).d }},
		{"pipe", func() time.Duration { return mustPipe(b, ddJob) }},
	}
	for _, v := range []struct{ name, exe string }{{"svc-commandcore", ccBin}, {"svc-minisup", miniSup}, {"svc-minisup-p1", miniSupP1}} {
		state := stateDir(b)
		svc, err := newService(state, v.exe)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(svc.Close)
		runs = append(runs, struct {
			name string
			run  func() time.Duration
		}{v.name, func() time.Duration { return serviceBig(b, svc, state, ddJob) }})
	}
	samples := make([][]time.Duration, len(runs))
	for i := range b.N {
		for k := range runs {
			j := (i + k) % len(runs)
			samples[j] = append(samples[j], runs[j].run())
		}
	}
	b.ReportMetric(0, "ns/op")
	for j, r := range runs {
		b.ReportMetric(mbps(summarize(samples[j]).P50), r.name+"-MB/s")
	}
}

// serviceBig runs command through svc in this process and returns the time
// from Start until the job is terminal.
func serviceBig(b *testing.B, svc *jobs.Service, state, command string) time.Duration {
	t0 := time.Now()
	res, err := svc.Start(context.Background(), principal.Local, jobs.StartRequest{Command: command})
	if err != nil {
		b.Fatal(err)
	}
	if err := waitEnded(jobDir(state, res.ProcessID), 500*time.Microsecond, 5*time.Minute); err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	rec, err := svc.Status(principal.Local, res.ProcessID)
	if err != nil || rec.Capture == nil || rec.Capture.Stdout.ObservedBytes == nil || *rec.Capture.Stdout.ObservedBytes != captureBytes {
		b.Fatalf("capture incomplete: %v", err)
	}
	if err := finishService(svc, state, res.ProcessID); err != nil {
		b.Fatal(err)
	}
	return d
}

func mustPipe(b *testing.B, command string) time.Duration {
	d, _, err := pipeRun(command)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// memPeak is what sampling a process's /proc/PID/status found.
type memPeak struct {
	samples              int
	rssKiB, hwmKiB       int64 // max VmRSS seen; last VmHWM (the kernel's own peak)
	anonKiB, fileKiB     int64 // RssAnon and RssFile at the max VmRSS sample
	firstRSS, firstAnon  int64 // the first sample (just after the identity claim)
	shmemKiB, threadsMax int64
	// rollup is /proc/PID/smaps_rollup and mappings the largest mappings by
	// Rss, both read once mid-capture (after half a second).
	rollup   map[string]int64
	mappings []string
}

// sampleMemory samples /proc/pid/status every `every` until done exists
// (the job is terminal) or the process is gone.
func sampleMemory(pid int, done string, every time.Duration) memPeak {
	var p memPeak
	path := fmt.Sprintf("/proc/%d/status", pid)
	t0 := time.Now()
	for {
		data, err := os.ReadFile(path)
		if err != nil {
			break
		}
		f := statusFields(data)
		if p.samples == 0 {
			p.firstRSS, p.firstAnon = f["VmRSS"], f["RssAnon"]
		}
		p.samples++
		if f["VmRSS"] > p.rssKiB {
			p.rssKiB, p.anonKiB, p.fileKiB, p.shmemKiB = f["VmRSS"], f["RssAnon"], f["RssFile"], f["RssShmem"]
		}
		p.hwmKiB = max(p.hwmKiB, f["VmHWM"])
		p.threadsMax = max(p.threadsMax, f["Threads"])
		if p.rollup == nil && time.Since(t0) > 500*time.Millisecond {
			if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
				p.rollup = statusFields(data)
			}
			p.mappings = topMappings(pid, 8)
		}
		if _, err := os.Stat(done); err == nil {
			break
		}
		time.Sleep(every)
	}
	return p
}

// topMappings returns the n mappings of pid with the largest Rss, as
// "Rss KiB  path" lines (anonymous mappings are summed as [anon]).
func topMappings(pid, n int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil
	}
	rss := map[string]int64{}
	var cur string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			cur = "[anon]"
			if len(fields) >= 6 {
				cur = fields[5] + " " + fields[1]
			}
			continue
		}
		if len(fields) >= 2 && fields[0] == "Rss:" {
			v, _ := strconv.ParseInt(fields[1], 10, 64)
			rss[cur] += v
		}
	}
	var out []string
	for k, v := range rss {
		if v > 0 {
			out = append(out, fmt.Sprintf("%6d KiB  %s", v, k))
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out[:min(n, len(out))]
}

// statusFields parses the numeric fields of /proc/PID/status (kB values).
func statusFields(data []byte) map[string]int64 {
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		if n, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

// BenchmarkSupervisorMemory runs the 2 GiB job over MCP and samples the
// supervisor's /proc/PID/status every 2 ms while it captures. VmHWM is the
// kernel's high-water mark of VmRSS, so it is the true peak even between
// samples (as long as one sample lands late in the run).
func BenchmarkSupervisorMemory(b *testing.B) {
	c := newMCP(b, stateDir(b))
	var worst memPeak
	for range b.N {
		p := runBig(b, c, bigJob, 2*time.Millisecond).peak
		if p.hwmKiB >= worst.hwmKiB {
			worst = p
		}
	}
	reportMemory(b, worst)
}

// BenchmarkSupervisorMemoryMiniSup is BenchmarkSupervisorMemory with the
// supervisor-only prototype (bench/cmd/minisup), launched by jobs.Service in
// this process (`commandcore mcp` always re-executes itself).
func BenchmarkSupervisorMemoryMiniSup(b *testing.B) {
	state := stateDir(b)
	svc, err := newService(state, miniSup)
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	var worst memPeak
	for range b.N {
		res, err := svc.Start(context.Background(), principal.Local, jobs.StartRequest{Command: bigJob})
		if err != nil {
			b.Fatal(err)
		}
		rec, err := svc.Status(principal.Local, res.ProcessID)
		if err != nil || rec.Claim == nil {
			b.Fatalf("no supervisor identity: %v", err)
		}
		p := sampleMemory(rec.Claim.Supervisor.PID, filepath.Join(jobDir(state, res.ProcessID), jobmeta.ResultFile), 2*time.Millisecond)
		if err := finishService(svc, state, res.ProcessID); err != nil {
			b.Fatal(err)
		}
		if p.hwmKiB >= worst.hwmKiB {
			worst = p
		}
	}
	reportMemory(b, worst)
}

func reportMemory(b *testing.B, worst memPeak) {
	if worst.samples == 0 {
		b.Fatal("no memory sample of the supervisor")
	}
	b.ReportMetric(float64(worst.hwmKiB), "VmHWM-KiB")
	b.ReportMetric(float64(worst.rssKiB), "peak-VmRSS-KiB")
	b.ReportMetric(float64(worst.anonKiB), "RssAnon-KiB")
	b.ReportMetric(float64(worst.fileKiB), "RssFile-KiB")
	b.ReportMetric(float64(worst.firstRSS), "claim-VmRSS-KiB")
	b.ReportMetric(float64(worst.samples), "samples")
	b.ReportMetric(float64(worst.threadsMax), "threads")
	if r := worst.rollup; r != nil {
		b.ReportMetric(float64(r["Pss"]), "Pss-KiB")
		b.ReportMetric(float64(r["Private_Dirty"]+r["Private_Clean"]), "Private-KiB")
		b.Logf("supervisor mid-capture smaps_rollup: Rss %d KiB, Pss %d (anon %d, file %d), Shared_Clean %d, Private_Clean %d, Private_Dirty %d",
			r["Rss"], r["Pss"], r["Pss_Anon"], r["Pss_File"], r["Shared_Clean"], r["Private_Clean"], r["Private_Dirty"])
		for _, m := range worst.mappings {
			b.Logf("  %s", m)
		}
	}
}
