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
//
// The 31 live jobs are 31 more units in the user manager, which every
// launch there pays for, CommandCore's or not. So the run has two phases:
// first, with no live job anywhere, the empty agent's launch and blocking
// `systemd-run --user true` interleaved (alone-*); then, with the full
// table, both again and the full agent's. The manager's share of the
// growth is what blocking systemd-run gained (manager-share-ms);
// CommandCore's own is the rest of full - empty-alone (own-share-ms),
// reported against the empty-alone launch (own-share/empty-alone; target
// ≤ 0.10).
func BenchmarkStartFullTable(b *testing.B) {
	empty := newMCP(b, stateDir(b))
	full := newMCP(b, stateDir(b))
	sdrun := systemdRunBlocking()
	alone := func() (time.Duration, error) {
		time.Sleep(quietPause)
		return sdrun.run()
	}
	var emptyAlone, sdrunAlone []time.Duration
	for i := range b.N + 1 {
		de, err := startEmpty(empty)
		if err != nil {
			b.Fatalf("empty, no live units: %v", err)
		}
		ds, err := alone()
		if err != nil {
			b.Fatalf("systemd-run, no live units: %v", err)
		}
		if i > 0 {
			emptyAlone, sdrunAlone = append(emptyAlone, de), append(sdrunAlone, ds)
		}
	}
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
	// In the full table the job stays, read, as the 99 before it.
	startFull := func() (time.Duration, error) {
		time.Sleep(quietPause)
		t0 := time.Now()
		res, err := full.callRaw("process.start", map[string]any{"command": "true"})
		d := time.Since(t0)
		var out jobs.StartResult
		if err := testkit.DecodeResult("process.start", res, err, &out); err != nil {
			return d, err
		}
		if err := waitEnded(jobDir(full.state, out.ProcessID), 200*time.Microsecond, time.Minute); err != nil {
			return d, err
		}
		return d, full.call("process.output", map[string]any{"process_id": out.ProcessID}, nil)
	}
	var emptyS, fullS, listS, sdrunS []time.Duration
	for i := range b.N + 1 {
		var de, df time.Duration
		var errE, errF error
		if i%2 == 0 {
			de, errE = startEmpty(empty)
			df, errF = startFull()
		} else {
			df, errF = startFull()
			de, errE = startEmpty(empty)
		}
		if errE != nil {
			b.Fatalf("empty: %v", errE)
		}
		if errF != nil {
			b.Fatalf("full: %v", errF)
		}
		ds, err := alone()
		if err != nil {
			b.Fatalf("systemd-run, 31 live units: %v", err)
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
		emptyS, fullS, listS, sdrunS = append(emptyS, de), append(fullS, df), append(listS, dl), append(sdrunS, ds)
	}
	e, f, l := summarize(emptyS), summarize(fullS), summarize(listS)
	ea, sa, s31 := summarize(emptyAlone), summarize(sdrunAlone), summarize(sdrunS)
	b.ReportMetric(ms(e.P50), "empty-p50-ms")
	b.ReportMetric(ms(f.P50), "full-p50-ms")
	b.ReportMetric(ms(f.P50)/ms(e.P50), "full/empty-p50")
	b.ReportMetric(ms(l.P50), "jobs-p50-ms")
	b.ReportMetric(ms(l.P90), "jobs-p90-ms")
	b.ReportMetric(ms(ea.P50), "empty-alone-p50-ms")
	b.ReportMetric(ms(sa.P50), "sdrun-alone-p50-ms")
	b.ReportMetric(ms(s31.P50), "sdrun-31-p50-ms")
	manager := ms(s31.P50) - ms(sa.P50)
	own := ms(f.P50) - ms(ea.P50) - manager
	b.ReportMetric(manager, "manager-share-ms")
	b.ReportMetric(own, "own-share-ms")
	b.ReportMetric(own/ms(ea.P50), "own-share/empty-alone")
}

// startEmpty launches `true` on c after a quiet pause, timing the call,
// and forgets the job.
func startEmpty(c *mcpClient) (time.Duration, error) {
	time.Sleep(quietPause)
	t0 := time.Now()
	res, err := c.callRaw("process.start", map[string]any{"command": "true"})
	d := time.Since(t0)
	var out jobs.StartResult
	if err := testkit.DecodeResult("process.start", res, err, &out); err != nil {
		return d, err
	}
	_, err = c.finish(out.ProcessID)
	return d, err
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
