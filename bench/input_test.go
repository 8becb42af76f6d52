package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
)

// interactiveJob reads its stdin to the end and then idles, so the same
// command serves all three variants of the memory benchmark: with stdin
// /dev/null (a plain job) cat ends at once, with a pipe or a terminal it
// takes whatever input comes.
const interactiveJob = "cat >/dev/null; exec sleep 600"

// memInput is what the memory benchmark sends an interactive job, in calls
// of 64 KiB (the bound per call) of 64-byte text lines, so a terminal in
// canonical mode takes them line by line (and echoes them).
var memInput = strings.Repeat(strings.Repeat("m", 63)+"\n", 1024)

// memReadings are the points at which the memory benchmark reads a
// supervisor: idle (settled after start), then settled after 1 MiB and
// after 16 MiB of input in all (16 and 256 calls); a plain job is read
// after the same pauses. 1 MiB is less than the Go runtime's smallest
// heap goal (4 MiB), so the first reading after input may see garbage no
// collection has run for yet; 16 MiB shows where it settles.
var memReadings = []struct {
	name  string
	calls int // process.input calls before this reading, in all
}{{"idle", 0}, {"input1M", 16}, {"input16M", 256}}

// memPoint is one reading of a supervisor's memory (KiB).
type memPoint struct {
	pss, privDirty, private, anon, hwm int64
}

func readMem(pid int) (memPoint, error) {
	roll, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return memPoint{}, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memPoint{}, err
	}
	r, s := statusFields(roll), statusFields(status)
	return memPoint{
		pss: r["Pss"], privDirty: r["Private_Dirty"], private: r["Private_Dirty"] + r["Private_Clean"],
		anon: s["RssAnon"], hwm: s["VmHWM"],
	}, nil
}

// settle is how long a supervisor is left alone before its memory is read,
// so the reading is of a steady state, not of work in flight.
const settle = 300 * time.Millisecond

// memoryOf starts interactiveJob over MCP with start's extra arguments
// (none, stdin, or a pty) and reads its supervisor's memory at each of
// memReadings, sending an interactive job its input in between. Then it
// stops the job and forgets it.
func memoryOf(c *mcpClient, extra map[string]any) ([]memPoint, error) {
	args := map[string]any{"command": interactiveJob}
	for k, v := range extra {
		args[k] = v
	}
	var res jobs.StartResult
	if err := c.call("process.start", args, &res); err != nil {
		return nil, err
	}
	if res.FailureDomain != jobmeta.DomainSystemdUnit {
		return nil, errNotSystemd
	}
	id := res.ProcessID
	var rec record
	if err := c.call("process.status", map[string]any{"process_id": id}, &rec); err != nil {
		return nil, err
	}
	if rec.Identity == nil {
		return nil, fmt.Errorf("job %s has no supervisor identity", id)
	}
	pid := rec.Identity.Supervisor.PID
	var points []memPoint
	sent := 0
	for _, r := range memReadings {
		for ; len(extra) > 0 && sent < r.calls; sent++ {
			var in jobs.InputResult
			if err := c.call("process.input", map[string]any{"process_id": id, "data": memInput}, &in); err != nil {
				return nil, err
			}
			if in.AcceptedBytes != len(memInput) {
				return nil, fmt.Errorf("process.input accepted %d of %d bytes", in.AcceptedBytes, len(memInput))
			}
		}
		time.Sleep(settle)
		p, err := readMem(pid)
		if err != nil {
			return nil, err
		}
		points = append(points, p)
	}
	if err := c.call("process.stop", map[string]any{"process_id": id}, nil); err != nil {
		return nil, err
	}
	if err := waitEnded(jobDir(c.state, id), time.Millisecond, time.Minute); err != nil {
		return nil, err
	}
	return points, c.call("process.forget", map[string]any{"process_id": id}, nil)
}

// BenchmarkInputSupervisorMemory compares the supervisor's memory of a job
// with a stdin pipe and of a job on a terminal (pty 80x24) with that of a
// plain job (stdin /dev/null), all running interactiveJob over MCP. Each
// iteration runs one job of each variant, in an order rotated per
// iteration. It reports, per variant and per reading (memReadings), the
// median Pss, Private_Dirty and Private
// (Private_Dirty + Private_Clean, from /proc/PID/smaps_rollup), RssAnon and
// VmHWM (from /proc/PID/status), in KiB, with the minimum and maximum of
// Private, and the median over iterations of each interactive job's
// Private minus the plain job's of the same iteration.
//
// With COMMANDCORE_BASE_BIN (a build to compare with, e.g. one without the
// pty's terminal emulator) it also runs a "base-pty" variant through that
// build and reports each pty job's Private minus the base pty job's of the
// same iteration (pty-vs-base).
func BenchmarkInputSupervisorMemory(b *testing.B) {
	c := newMCP(b, stateDir(b))
	pty := map[string]any{"pty": map[string]any{"cols": 80, "rows": 24}}
	variants := []struct {
		name  string
		extra map[string]any
		c     *mcpClient
	}{
		{"plain", nil, c},
		{"stdin", map[string]any{"stdin": true}, c},
		{"pty", pty, c},
	}
	if base := os.Getenv("COMMANDCORE_BASE_BIN"); base != "" {
		variants = append(variants, struct {
			name  string
			extra map[string]any
			c     *mcpClient
		}{"base-pty", pty, newMCPOf(b, base, stateDir(b))})
	}
	for _, v := range variants {
		if _, err := memoryOf(v.c, v.extra); err != nil {
			b.Fatalf("%s warm-up: %v", v.name, err)
		}
	}
	// readings[variant][reading][iteration]
	readings := make([][][]memPoint, len(variants))
	for j := range readings {
		readings[j] = make([][]memPoint, len(memReadings))
	}
	for i := range b.N {
		for k := range variants {
			j := (i + k) % len(variants)
			points, err := memoryOf(variants[j].c, variants[j].extra)
			if err != nil {
				b.Fatalf("%s: %v", variants[j].name, err)
			}
			for r, p := range points {
				readings[j][r] = append(readings[j][r], p)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	med := func(ps []memPoint, f func(memPoint) int64) benchStats {
		vals := make([]int64, len(ps))
		for i, p := range ps {
			vals[i] = f(p)
		}
		return kibStats(vals)
	}
	fields := []struct {
		name string
		f    func(memPoint) int64
	}{
		{"Pss", func(p memPoint) int64 { return p.pss }},
		{"PrivDirty", func(p memPoint) int64 { return p.privDirty }},
		{"Private", func(p memPoint) int64 { return p.private }},
		{"RssAnon", func(p memPoint) int64 { return p.anon }},
		{"VmHWM", func(p memPoint) int64 { return p.hwm }},
	}
	for j, v := range variants {
		for r, when := range memReadings {
			for _, f := range fields {
				st := med(readings[j][r], f.f)
				b.ReportMetric(st.p50, fmt.Sprintf("%s-%s-%s-KiB", v.name, when.name, f.name))
				if f.name == "Private" || f.name == "PrivDirty" {
					b.ReportMetric(st.min, fmt.Sprintf("%s-%s-%s-min-KiB", v.name, when.name, f.name))
					b.ReportMetric(st.max, fmt.Sprintf("%s-%s-%s-max-KiB", v.name, when.name, f.name))
				}
			}
		}
	}
	for j, v := range variants[1:] {
		for r, when := range memReadings {
			diff := make([]memPoint, b.N)
			for i := range b.N {
				diff[i] = memPoint{private: readings[j+1][r][i].private - readings[0][r][i].private}
			}
			st := med(diff, func(p memPoint) int64 { return p.private })
			b.ReportMetric(st.p50, fmt.Sprintf("%s-%s-extra-Private-KiB", v.name, when.name))
			b.ReportMetric(st.min, fmt.Sprintf("%s-%s-extra-Private-min-KiB", v.name, when.name))
			b.ReportMetric(st.max, fmt.Sprintf("%s-%s-extra-Private-max-KiB", v.name, when.name))
		}
	}
	if len(variants) == 4 {
		for r, when := range memReadings {
			diff := make([]memPoint, b.N)
			for i := range b.N {
				diff[i] = memPoint{private: readings[2][r][i].private - readings[3][r][i].private}
			}
			st := med(diff, func(p memPoint) int64 { return p.private })
			b.ReportMetric(st.p50, fmt.Sprintf("pty-vs-base-%s-Private-KiB", when.name))
			b.ReportMetric(st.min, fmt.Sprintf("pty-vs-base-%s-Private-min-KiB", when.name))
			b.ReportMetric(st.max, fmt.Sprintf("pty-vs-base-%s-Private-max-KiB", when.name))
		}
	}
}

// benchStats is a median with its range.
type benchStats struct{ p50, min, max float64 }

// kibStats summarises KiB readings as latency samples are summarised
// (benchkit.Summarize: the median of an even count is the mean of the two
// middle values), through time.Duration, which is an int64 too.
func kibStats(vals []int64) benchStats {
	ds := make([]time.Duration, len(vals))
	for i, v := range vals {
		ds[i] = time.Duration(v)
	}
	st := summarize(ds)
	return benchStats{float64(st.P50), float64(st.Min), float64(st.Max)}
}
