package e2e

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
)

func TestBigInterleavedOutputKeepsHeadAndTail(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	const outBytes, errBytes = 5 << 20, 3 << 20
	exe, err := executable()
	if err != nil {
		t.Fatal(err)
	}
	res := c.start(map[string]any{
		"command": `exec "$E2E_SELF"`,
		"env":     map[string]string{"E2E_SELF": exe, "E2E_EMIT": itoa(outBytes) + "," + itoa(errBytes) + ",7001"},
		"wait_ms": 30000,
	})
	if res.FailureDomain != "systemd_unit" || !strings.HasPrefix(res.Unit, "commandcore-job-") {
		t.Fatalf("job not in a transient unit: %+v", res)
	}
	rec := c.waitTerminal(res.ProcessID, time.Minute)
	if rec.State != "exited" || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Fatalf("job ended %s exit %v", rec.State, rec.ExitCode)
	}
	col := c.readAll(res.ProcessID, 200<<10)
	for s, total := range []int64{outBytes, errBytes} {
		cp := []streamCapture{rec.Capture.Stdout, rec.Capture.Stderr}[s]
		head, tail := int64(limits.CaptureHeadBytes), int64(limits.CaptureTailBytes)
		if *cp.ObservedBytes != total || *cp.RetainedBytes != head+tail || *cp.DroppedBytes != total-head-tail || !*cp.Truncated || !cp.Complete {
			t.Errorf("stream %d counters: observed %d retained %d dropped %d truncated %v complete %v",
				s, *cp.ObservedBytes, *cp.RetainedBytes, *cp.DroppedBytes, *cp.Truncated, cp.Complete)
		}
		if len(col.gaps[s]) != 1 || col.gaps[s][0] != (jobs.Gap{From: head, To: total - tail}) {
			t.Errorf("stream %d gaps %v, want one [%d,%d)", s, col.gaps[s], head, total-tail)
		}
		if int64(len(col.data[s])) != head+tail {
			t.Fatalf("stream %d: got %d bytes, want %d", s, len(col.data[s]), head+tail)
		}
		var i int
		for _, r := range col.ranges[s] {
			if r[0] >= head && r[0] < total-tail {
				t.Fatalf("stream %d: page starts inside the discarded middle at %d", s, r[0])
			}
			for pos := r[0]; pos < r[1]; pos++ {
				if col.data[s][i] != streamByte(s, pos) {
					t.Fatalf("stream %d: wrong byte at %d", s, pos)
				}
				i++
			}
		}
	}
	if !c.status(res.ProcessID).Read {
		t.Error("reading the final page did not mark the job read")
	}
}

func TestNonUTF8OutputIsLossless(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	res := c.start(map[string]any{"command": `printf 'a\377\376\000b\n'; printf '\303\251t\303\251' >&2`, "wait_ms": 10000})
	if !res.Terminal {
		t.Fatalf("job did not end within wait_ms: %s", res.State)
	}
	if res.Output == nil {
		t.Fatal("a job that ended within wait_ms returned no first page")
	}
	got := decode(t, res.Output.Stdout)
	if want := []byte("a\xff\xfe\x00b\n"); !bytes.Equal(got, want) || res.Output.Stdout.Encoding != "base64" {
		t.Errorf("stdout %q (%s), want %q as base64", got, res.Output.Stdout.Encoding, want)
	}
	if got := decode(t, res.Output.Stderr); string(got) != "été" || res.Output.Stderr.Encoding != "utf-8" {
		t.Errorf("stderr %q (%s), want été as utf-8", got, res.Output.Stderr.Encoding)
	}
}

func TestMegabyteEnvironment(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	env := map[string]string{}
	total := 0
	for i := 0; total < 1<<20; i++ {
		v := strings.Repeat(string(rune('a'+i%26)), 64<<10)
		env["BIG_"+itoa(int64(i))] = v
		total += len(v)
	}
	res := c.start(map[string]any{"command": `env | grep -c '^BIG_'; printf %s "$BIG_3" | wc -c`, "env": env, "wait_ms": 10000})
	if res.State != "exited" || res.Output == nil {
		t.Fatalf("job ended %s", res.State)
	}
	if got := strings.Fields(string(decode(t, res.Output.Stdout))); len(got) != 2 || got[0] != itoa(int64(len(env))) || got[1] != "65536" {
		t.Fatalf("job saw %q, want %d variables and a 65536-byte value", got, len(env))
	}
}

// TestPagesDoNotSplitCharacters: small pages end before a character they
// would cut, so UTF-8 output stays text page after page.
func TestPagesDoNotSplitCharacters(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	res := c.start(map[string]any{"command": `printf '€€€€€'`, "wait_ms": 10000})
	if !res.Terminal {
		t.Fatalf("job still %s", res.State)
	}
	var all strings.Builder
	var off int64
	for i := 0; i < 20; i++ {
		var out jobs.Output
		c.ok("process.output", map[string]any{"process_id": res.ProcessID, "stdout_offset": off, "max_bytes": 4}, &out)
		if out.Stdout.Encoding != "utf-8" {
			t.Fatalf("page at %d is %s: %q", off, out.Stdout.Encoding, out.Stdout.Data)
		}
		all.WriteString(out.Stdout.Data)
		off = out.Stdout.NextOffset
		if out.Stdout.EOF {
			break
		}
	}
	if all.String() != "€€€€€" {
		t.Fatalf("reassembled %q", all.String())
	}
}

// TestEnvStringExecCannotPass: one environment string longer than exec
// takes (128 KiB) is refused up front by both process.start and
// process.run; a 100 KiB one reaches the job.
func TestEnvStringExecCannotPass(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	over := map[string]string{"BIG": strings.Repeat("x", 128<<10+1)}
	for _, tool := range []string{"process.start", "process.run"} {
		if code, _ := c.fail(tool, map[string]any{"command": "true", "env": over}); code != "invalid_argument" {
			t.Errorf("%s with a 128 KiB+1 env string: %s, want invalid_argument", tool, code)
		}
	}
	fits := map[string]string{"BIG": strings.Repeat("y", 100<<10)}
	res := c.start(map[string]any{"command": `printf %s "$BIG" | wc -c`, "env": fits, "wait_ms": 10000})
	if res.State != "exited" || res.Output == nil || strings.TrimSpace(string(decode(t, res.Output.Stdout))) != itoa(100<<10) {
		t.Fatalf("job with a 100 KiB env string: %s %+v", res.State, res.Output)
	}
	var run struct{ Stdout struct{ Data string } }
	c.ok("process.run", map[string]any{"command": `printf %s "$BIG" | wc -c`, "env": fits}, &run)
	if strings.TrimSpace(run.Stdout.Data) != itoa(100<<10) {
		t.Fatalf("process.run with a 100 KiB env string saw %q", run.Stdout.Data)
	}
}

// TestFollowingAChattyJobCostsACallPerBatch: a job prints a line every
// 10 ms for about three seconds; following it with wait_ms and min_bytes
// takes a handful of calls, each returning at least min_bytes until the
// end, and every line arrives once, in order.
func TestFollowingAChattyJobCostsACallPerBatch(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	job := c.start(map[string]any{"command": `i=0; while [ $i -lt 300 ]; do printf 'line %03d\n' $i; i=$((i+1)); sleep 0.01; done`})
	const minBytes = 1024
	var got strings.Builder
	var offset int64
	calls := 0
	for {
		var page struct {
			Stdout struct {
				Data       string `json:"data"`
				NextOffset int64  `json:"next_offset"`
				EOF        bool   `json:"eof"`
			} `json:"stdout"`
			Terminal bool `json:"terminal"`
		}
		c.ok("process.output", map[string]any{"process_id": job.ProcessID, "stdout_offset": offset, "wait_ms": 30000, "min_bytes": minBytes}, &page)
		calls++
		got.WriteString(page.Stdout.Data)
		if !page.Terminal && page.Stdout.NextOffset-offset < minBytes {
			t.Fatalf("call %d returned %d new bytes of a live job, under min_bytes", calls, page.Stdout.NextOffset-offset)
		}
		offset = page.Stdout.NextOffset
		if page.Stdout.EOF {
			break
		}
		if calls > 20 {
			t.Fatalf("following took over 20 calls")
		}
	}
	var want strings.Builder
	for i := range 300 {
		fmt.Fprintf(&want, "line %03d\n", i)
	}
	if got.String() != want.String() {
		t.Fatalf("the lines followed differ from the job's (%d bytes, want %d)", got.Len(), want.Len())
	}
	// 2,700 bytes at 1,024 a call, and the end: at most four calls.
	if calls > 4 {
		t.Fatalf("following took %d calls, want at most 4", calls)
	}
	if code, _ := c.fail("process.output", map[string]any{"process_id": job.ProcessID, "min_bytes": (1 << 20) + 1}); code != "invalid_argument" {
		t.Fatalf("min_bytes past a page: %s", code)
	}
}
