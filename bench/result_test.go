package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/testkit"
)

// resultRound is how many calls of each tool one round makes on a server
// between two readings of its CPU time.
const resultRound = 10

// BenchmarkResultCost: what one tool result costs the agent over stdio: a
// 64 KiB process.output page (ASCII, from a live job) and a process.jobs
// listing of 130 jobs (31 live, 99 terminal and read). Each of b.N rounds
// makes resultRound calls of each and reads the `commandcore mcp`
// process's CPU time (procCPU) around them, so besides each call's
// latency it reports the agent's CPU per call, which other load on the
// machine moves less than latency; and the agent's peak RSS (VmHWM). With
// COMMANDCORE_BASE_BIN set, a second server of that binary gets the same
// calls, the two alternating round by round (which one goes first too), so
// outside load falls on both alike; its metrics are prefixed base-.
func BenchmarkResultCost(b *testing.B) {
	type server struct {
		prefix         string
		c              *mcpClient
		probe          string
		outS, jobsS    []time.Duration
		outCPU, jobCPU time.Duration
	}
	servers := []*server{{prefix: "", c: newMCP(b, stateDir(b))}}
	if base := os.Getenv("COMMANDCORE_BASE_BIN"); base != "" {
		servers = append(servers, &server{prefix: "base-", c: newMCPOf(b, base, stateDir(b))})
	}
	for _, s := range servers {
		s.probe = resultTable(b, s.c)
	}
	output := func(s *server) error {
		var out jobs.Output
		res, err := s.c.callRaw("process.output", map[string]any{"process_id": s.probe, "stdout_offset": 30000, "max_bytes": 65536})
		if err := testkit.DecodeResult("process.output", res, err, &out); err != nil {
			return err
		}
		if len(out.Stdout.Data) != 65536 {
			return fmt.Errorf("the page holds %d bytes, not 65536", len(out.Stdout.Data))
		}
		return nil
	}
	list := func(s *server) error {
		var l struct {
			Jobs []struct{} `json:"jobs"`
		}
		res, err := s.c.callRaw("process.jobs", nil)
		if err := testkit.DecodeResult("process.jobs", res, err, &l); err != nil {
			return err
		}
		if len(l.Jobs) != 130 {
			return fmt.Errorf("process.jobs lists %d jobs, not 130", len(l.Jobs))
		}
		return nil
	}
	// sample makes resultRound calls of one tool and returns their
	// latencies and the server's CPU time over them.
	sample := func(s *server, call func(*server) error) ([]time.Duration, time.Duration) {
		var lat []time.Duration
		cpu0 := procCPU(b, s.c.cmd.Process.Pid)
		for range resultRound {
			t0 := time.Now()
			if err := call(s); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		return lat, procCPU(b, s.c.cmd.Process.Pid) - cpu0
	}
	for _, s := range servers { // warm-up
		sample(s, output)
		sample(s, list)
	}
	b.ResetTimer()
	for i := range b.N {
		for k := range servers {
			s := servers[(i+k)%len(servers)]
			lat, cpu := sample(s, output)
			s.outS, s.outCPU = append(s.outS, lat...), s.outCPU+cpu
			lat, cpu = sample(s, list)
			s.jobsS, s.jobCPU = append(s.jobsS, lat...), s.jobCPU+cpu
		}
	}
	b.StopTimer()
	calls := float64(b.N * resultRound)
	for _, s := range servers {
		o, j := summarize(s.outS), summarize(s.jobsS)
		b.ReportMetric(ms(o.P50), s.prefix+"output-p50-ms")
		b.ReportMetric(ms(s.outCPU)/calls, s.prefix+"output-cpu-ms")
		b.ReportMetric(ms(j.P50), s.prefix+"jobs-p50-ms")
		b.ReportMetric(ms(s.jobCPU)/calls, s.prefix+"jobs-cpu-ms")
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.c.cmd.Process.Pid))
		if err != nil {
			b.Fatal(err)
		}
		hwm := statusFields(data)["VmHWM"]
		b.ReportMetric(float64(hwm), s.prefix+"agent-peak-rss-KiB")
		name := "this build"
		if s.prefix != "" {
			name = "base"
		}
		fmt.Printf("%s: process.output 64 KiB p50 %.2f ms, agent CPU %.2f ms a call; process.jobs (130) p50 %.2f ms, agent CPU %.2f ms a call; agent peak RSS %d KiB\n",
			name, ms(o.P50), ms(s.outCPU)/calls, ms(j.P50), ms(s.jobCPU)/calls, hwm)
	}
}

// resultTable fills c's state directory for BenchmarkResultCost: a probe
// job that printed 100,000 bytes and sleeps (returned), 30 more live jobs
// and 99 terminal ones whose final page was read.
func resultTable(b *testing.B, c *mcpClient) string {
	var probe jobs.StartResult
	if err := c.call("process.start", map[string]any{"command": "printf 'x%.0s' $(seq 1 100000); exec sleep 600"}, &probe); err != nil {
		b.Fatal(err)
	}
	live := []string{probe.ProcessID}
	for range 30 {
		var res jobs.StartResult
		if err := c.call("process.start", map[string]any{"command": "exec sleep 600"}, &res); err != nil {
			b.Fatal(err)
		}
		live = append(live, res.ProcessID)
	}
	b.Cleanup(func() {
		for _, id := range live {
			c.call("process.stop", map[string]any{"process_id": id}, nil)
		}
		for _, id := range live {
			waitStopped(c, id)
		}
	})
	for range 99 {
		var res jobs.StartResult
		if err := c.call("process.start", map[string]any{"command": "true", "wait_ms": 10000}, &res); err != nil {
			b.Fatal(err)
		}
		if err := c.call("process.output", map[string]any{"process_id": res.ProcessID}, nil); err != nil {
			b.Fatal(err)
		}
	}
	// The probe's page is complete once its command moved on to sleep.
	testkit.Eventually(b, 20*time.Second, func() error {
		var out jobs.Output
		if err := c.call("process.output", map[string]any{"process_id": probe.ProcessID, "stdout_offset": 99999, "max_bytes": 1}, &out); err != nil || len(out.Stdout.Data) != 1 {
			return fmt.Errorf("the probe did not print its 100,000 bytes (last: %d bytes at offset 99999, %v)", len(out.Stdout.Data), err)
		}
		return nil
	})
	return probe.ProcessID
}

// procCPU is the time process pid has run on a CPU, all its threads: the
// sum of their /proc/<pid>/task/<tid>/schedstat run times, exact to the
// nanosecond where /proc/<pid>/stat counts in 10 ms ticks. (A thread that
// exits takes its time with it; the Go runtime keeps its threads.)
func procCPU(b *testing.B, pid int) time.Duration {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		b.Fatalf("threads of %d: %v", pid, err)
	}
	var sum time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(data))
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			b.Fatalf("%s: %q", t, data)
		}
		sum += time.Duration(ns)
	}
	return sum
}
