package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobresources"
	"github.com/commandcore/commandcore/internal/jobs"
)

// stormBytes is what each storm job writes: on this 2-vCPU machine 31 of
// them take about 50 s together, past the 30 s the target names.
const stormBytes = 8 << 30

// stormMax bounds the storm: about 1 minute at the agent's priority
// (STORM_NICE=0), 2.5–4 minutes when the jobs are niced, as by default, and
// yield to the continuous paging (and to whatever else shares the machine).
const stormMax = 12 * time.Minute

// BenchmarkOutputStorm: 32 live jobs each writing stormBytes to stdout at
// full speed. While they run, the `commandcore mcp` process's RSS is
// sampled every 250 ms and one job's output is paged with process.output
// (64 KiB pages from its tail); the same paging before the storm is the
// idle baseline. Afterwards every job's observed_bytes must equal what it
// wrote. Targets (BENCHMARKS.md): RSS flat (±10 %), counters exact, paging p50
// during the storm ≤ 2× idle. Without a policy every job runs at the
// default niceness; STORM_NICE=N writes {"nice": N} to the state
// directory's job-resources.json first, so every job (the probe too) runs
// at that niceness, STORM_NICE=0 at the agent's own priority.
func BenchmarkOutputStorm(b *testing.B) {
	nice := niceFromEnv(b, "STORM_NICE")
	for range b.N {
		state := stateDir(b)
		writeNice(b, state, nice)
		c := newMCP(b, state)
		var probe jobs.StartResult
		if err := c.call("process.start", map[string]any{"command": "printf 'x%.0s' $(seq 1 100000); exec sleep 600"}, &probe); err != nil {
			b.Fatal(err)
		}
		page := func() time.Duration {
			t0 := time.Now()
			if err := c.call("process.output", map[string]any{"process_id": probe.ProcessID, "stdout_offset": 30000, "max_bytes": 65536}, nil); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		}
		time.Sleep(500 * time.Millisecond)
		var idle []time.Duration
		for range 50 {
			idle = append(idle, page())
		}
		var ids []string
		for range 31 {
			var res jobs.StartResult
			if err := c.call("process.start", map[string]any{"command": fmt.Sprintf("exec head -c %d /dev/zero", stormBytes)}, &res); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, res.ProcessID)
		}
		t0 := time.Now()
		var storm []time.Duration
		var rss []int64
		lastSample := time.Time{}
		for {
			ended := 0
			for _, id := range ids {
				if _, err := os.Stat(filepath.Join(jobDir(c.state, id), jobmeta.ResultFile)); err == nil {
					ended++
				}
			}
			if ended == len(ids) {
				break
			}
			if time.Since(t0) > stormMax {
				b.Fatalf("the storm did not end within %v", stormMax)
			}
			storm = append(storm, page())
			if time.Since(lastSample) >= 250*time.Millisecond {
				if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid)); err == nil {
					rss = append(rss, statusFields(data)["VmRSS"])
				}
				lastSample = time.Now()
			}
		}
		took := time.Since(t0)
		exact := 0
		for _, id := range ids {
			var rec record
			if err := c.call("process.status", map[string]any{"process_id": id}, &rec); err != nil {
				b.Fatal(err)
			}
			if o := rec.Capture.Stdout.ObservedBytes; o != nil && *o == stormBytes && rec.Capture.Stdout.Complete {
				exact++
			}
		}
		c.call("process.stop", map[string]any{"process_id": probe.ProcessID}, nil)
		waitStopped(c, probe.ProcessID)
		si, ss := summarize(idle), summarize(storm)
		// The medians of the first and last quarters of the samples tell
		// growth from noise.
		q := len(rss) / 4
		firstQ, lastQ := median(rss[:q]), median(rss[len(rss)-q:])
		sort.Slice(rss, func(i, j int) bool { return rss[i] < rss[j] })
		var lo, hi, med int64
		if len(rss) > 0 {
			lo, hi, med = rss[0], rss[len(rss)-1], rss[len(rss)/2]
		}
		b.ReportMetric(ms(si.P50), "idle-page-p50-ms")
		b.ReportMetric(ms(ss.P50), "storm-page-p50-ms")
		b.ReportMetric(ms(ss.P50)/ms(si.P50), "storm/idle")
		b.ReportMetric(float64(exact), "jobs-exact")
		b.ReportMetric(float64(med), "mcp-rss-median-KiB")
		policy := fmt.Sprintf("no policy: nice %d", jobresources.Caps{}.JobNice())
		if nice != nil {
			policy = fmt.Sprintf("nice %d", *nice)
		}
		fmt.Printf("storm (%s): 31 jobs × %d MiB + 1 pager job in %v; pages p50 idle %.2f ms, storm %.2f ms (%.2f×, %d pages); "+
			"mcp RSS min %d / median %d / max %d KiB over %d samples (max/min %.2f; first quarter's median %d, last quarter's %d); %d of 31 counters exact and sealed\n",
			policy, stormBytes>>20, took.Round(time.Second), ms(si.P50), ms(ss.P50), ms(ss.P50)/ms(si.P50), len(storm),
			lo, med, hi, len(rss), float64(hi)/float64(max(lo, 1)), firstQ, lastQ, exact)
	}
}

// median is the median of a copy of v, 0 for none.
func median(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]int64(nil), v...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// niceFromEnv reads the niceness the environment variable name asks the
// jobs of a benchmark to run at; nil when it is unset (the default).
func niceFromEnv(b *testing.B, name string) *int {
	v := os.Getenv(name)
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatalf("%s=%q: %v", name, v, err)
	}
	return &n
}

// writeNice writes {"nice": *nice} to state's job-resources.json, so that
// every job started in state runs at that niceness; nothing when nice is
// nil.
func writeNice(b *testing.B, state string, nice *int) {
	if nice == nil {
		return
	}
	pol, err := json.Marshal(jobresources.Caps{Nice: nice})
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, jobresources.FileName), pol, 0o600); err != nil {
		b.Fatal(err)
	}
}
