package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/testkit"
)

// BenchmarkStartFullTable: process.start of `true` over stdio with an empty
// state directory and with a full table on disk (99 terminal jobs, read,
// and 31 live ones), interleaved launch by launch so outside load falls on
// both alike, which goes first alternating; and process.jobs over the full
// table (132 jobs while a sample runs). Each launch starts after a quiet
// pause: without it one agent's work after its answer (the spare it
// makes, about 10 ms of unit start, exec and fsync) overlaps the other's
// next launch, and whichever agent is timed right after the other pays
// for it (BENCHMARKS.md). Targets: the full table's start p50 ≤ 1.1× the
// empty one's; process.jobs p50 ≤ 10 ms.
func BenchmarkStartFullTable(b *testing.B) {
	empty := newMCP(b, stateDir(b))
	full := newMCP(b, stateDir(b))
	var live []string
	for range 31 {
		var res jobs.StartResult
		if err := full.call("process.start", map[string]any{"command": "exec sleep 600"}, &res); err != nil {
			b.Fatal(err)
		}
		live = append(live, res.ProcessID)
	}
	b.Cleanup(func() {
		for _, id := range live {
			full.call("process.stop", map[string]any{"process_id": id}, nil)
		}
		for _, id := range live {
			waitStopped(full, id)
		}
	})
	for range 99 {
		var res jobs.StartResult
		if err := full.call("process.start", map[string]any{"command": "true", "wait_ms": 10000}, &res); err != nil {
			b.Fatal(err)
		}
		// Reading the final page marks the job read, so retention can
		// prune the oldest one as launches add more.
		if err := full.call("process.output", map[string]any{"process_id": res.ProcessID}, nil); err != nil {
			b.Fatal(err)
		}
	}
	start := func(c *mcpClient, forget bool) (time.Duration, error) {
		time.Sleep(quietPause)
		t0 := time.Now()
		res, err := c.callRaw("process.start", map[string]any{"command": "true"})
		d := time.Since(t0)
		var out jobs.StartResult
		if err := testkit.DecodeResult("process.start", res, err, &out); err != nil {
			return d, err
		}
		if forget {
			_, err = c.finish(out.ProcessID)
			return d, err
		}
		// In the full table the job stays, read, as the 99 before it.
		if err := waitEnded(jobDir(c.state, out.ProcessID), 200*time.Microsecond, time.Minute); err != nil {
			return d, err
		}
		return d, c.call("process.output", map[string]any{"process_id": out.ProcessID}, nil)
	}
	var emptyS, fullS, listS []time.Duration
	for i := range b.N + 1 {
		var de, df time.Duration
		var errE, errF error
		if i%2 == 0 {
			de, errE = start(empty, true)
			df, errF = start(full, false)
		} else {
			df, errF = start(full, false)
			de, errE = start(empty, true)
		}
		if errE != nil {
			b.Fatalf("empty: %v", errE)
		}
		if errF != nil {
			b.Fatalf("full: %v", errF)
		}
		time.Sleep(quietPause)
		t0 := time.Now()
		var list struct {
			Jobs []struct{} `json:"jobs"`
		}
		if err := full.call("process.jobs", nil, &list); err != nil {
			b.Fatal(err)
		}
		dl := time.Since(t0)
		if len(list.Jobs) < 130 {
			b.Fatalf("the full table lists %d jobs", len(list.Jobs))
		}
		if i == 0 {
			continue // warm-up
		}
		emptyS, fullS, listS = append(emptyS, de), append(fullS, df), append(listS, dl)
	}
	e, f, l := summarize(emptyS), summarize(fullS), summarize(listS)
	b.ReportMetric(ms(e.P50), "empty-p50-ms")
	b.ReportMetric(ms(f.P50), "full-p50-ms")
	b.ReportMetric(ms(f.P50)/ms(e.P50), "full/empty-p50")
	b.ReportMetric(ms(l.P50), "jobs-p50-ms")
	b.ReportMetric(ms(l.P90), "jobs-p90-ms")
}

// quietPause comes before each timed call, so that the work either agent
// does after its previous answer is over.
const quietPause = 50 * time.Millisecond

// waitStopped waits (at most 20 s) until a stopped job is terminal.
func waitStopped(c *mcpClient, id string) {
	testkit.Poll(20*time.Second, func() error {
		var rec record
		if err := c.call("process.status", map[string]any{"process_id": id}, &rec); err != nil || !rec.Terminal {
			return fmt.Errorf("job %s still %s (%v)", id, rec.State, err)
		}
		return nil
	})
}
