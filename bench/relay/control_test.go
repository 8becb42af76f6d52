package relaybench

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobs"
)

// startPython starts Python's REPL on an 80x24 terminal and waits, with
// process.wait until, for its first prompt.
func (s *side) startPython() (string, error) {
	var res startResult
	if _, err := s.call("process.start", map[string]any{"command": "exec python3 -q -i", "pty": map[string]any{"cols": 80, "rows": 24}}, &res); err != nil {
		return "", err
	}
	var w jobs.WaitResult
	if _, err := s.call("process.wait", map[string]any{"process_ids": []string{res.ProcessID}, "timeout_ms": 20000,
		"until": map[string]any{"output": map[string]any{"text": ">>> "}}}, &w); err != nil || w.Met != jobs.MetOutput {
		return res.ProcessID, fmt.Errorf("no first prompt: %+v, %v", w, err)
	}
	return res.ProcessID, nil
}

// ask sends 6*7 to the REPL: with until the next prompt, or with the quiet
// period only, and reports whether the reply held the whole answer (echo,
// 42, prompt).
func (s *side) ask(id string, until bool) (time.Duration, bool, error) {
	args := map[string]any{"process_id": id, "data": "6*7\n", "wait_ms": 10000}
	if until {
		args["until"] = ">>> "
	}
	res, d, err := s.input(args, 4)
	if err != nil {
		return d, false, err
	}
	got, err := pageBytes(res.Output.Stdout)
	whole := string(got) == "6*7\r\n42\r\n>>> "
	if until && !whole {
		err = fmt.Errorf("the reply with until is %q", got)
	}
	if !whole && err == nil {
		// The prompt came after the reply: read it, so the next round
		// starts from a quiet REPL.
		var w jobs.WaitResult
		_, err = s.call("process.wait", map[string]any{"process_ids": []string{id}, "timeout_ms": 10000,
			"until": map[string]any{"output": map[string]any{"text": ">>> ", "from_offset": map[string]any{"stdout": res.StdoutOffset + int64(len(got))}}}}, &w)
	}
	return d, whole, err
}

// BenchmarkREPLUntil drives Python's REPL on a pty as an agent does, over
// stdio and through the relay: *-until is process.input of "6*7\n" with
// wait_ms and until ">>> " (returns when the prompt is back), *-quiet the
// same without until (returns after 100 ms without output). It reports the
// p50 of each and how often the quiet reply held the whole answer (the
// echo, 42 and the next prompt; with until it always must).
func BenchmarkREPLUntil(b *testing.B) {
	e := setup(b)
	ids := map[*side]string{}
	for _, s := range []*side{e.stdio, e.remote} {
		id, err := s.startPython()
		if err != nil {
			b.Fatal(err)
		}
		ids[s] = id
		b.Cleanup(func() { s.end(id) })
	}
	names := []string{"stdio-until", "relay-until", "stdio-quiet", "relay-quiet"}
	whole := map[string]int{}
	samples := interleave(b, names, func(j, i int) (time.Duration, error) {
		s := e.stdio
		if strings.HasPrefix(names[j], "relay") {
			s = e.remote
		}
		d, ok, err := s.ask(ids[s], strings.HasSuffix(names[j], "until"))
		if ok && i >= 0 {
			whole[names[j]]++
		}
		return d, err
	})
	b.ReportMetric(0, "ns/op")
	for j, name := range names {
		report(b, name, samples[j])
		b.ReportMetric(float64(whole[name])/float64(len(samples[j])), name+"-whole-fraction")
	}
}

// BenchmarkUntilOutputLatency times, over stdio and through the relay,
// from the moment a job prints "ready" (its own clock, printed beside it)
// to the return of a process.wait until output "ready" that was waiting
// for it: the poll period plus the call's way back.
func BenchmarkUntilOutputLatency(b *testing.B) {
	e := setup(b)
	names := []string{"stdio", "relay"}
	samples := interleave(b, names, func(j, _ int) (time.Duration, error) {
		s := []*side{e.stdio, e.remote}[j]
		var res startResult
		if _, err := s.call("process.start", map[string]any{"command": "sleep 0.3; date +%s%N; echo ready; exec sleep 60"}, &res); err != nil {
			return 0, err
		}
		defer s.end(res.ProcessID)
		var w jobs.WaitResult
		if _, err := s.call("process.wait", map[string]any{"process_ids": []string{res.ProcessID}, "timeout_ms": 20000,
			"until": map[string]any{"output": map[string]any{"text": "ready"}}}, &w); err != nil || w.Met != jobs.MetOutput {
			return 0, fmt.Errorf("wait: %+v, %v", w, err)
		}
		returned := time.Now()
		var out jobs.Output
		if _, err := s.call("process.output", map[string]any{"process_id": res.ProcessID}, &out); err != nil {
			return 0, err
		}
		ns, err := strconv.ParseInt(strings.Fields(out.Stdout.Data)[0], 10, 64)
		if err != nil {
			return 0, err
		}
		return returned.Sub(time.Unix(0, ns)), nil
	})
	b.ReportMetric(0, "ns/op")
	for j, name := range names {
		report(b, name, samples[j])
	}
}

// BenchmarkScreen times process.screen of a job that shows a full 80x24
// screen, over stdio and through the relay, against process.output of the
// same job (its whole output, one page).
func BenchmarkScreen(b *testing.B) {
	e := setup(b)
	ids := map[*side]string{}
	draw := `i=0; while [ $i -lt 24 ]; do printf '\033[%d;1Hrow %02d %070d' $((i+1)) $i 0; i=$((i+1)); done; exec sleep 600`
	for _, s := range []*side{e.stdio, e.remote} {
		var res startResult
		if _, err := s.call("process.start", map[string]any{"command": draw, "pty": map[string]any{"cols": 80, "rows": 24}}, &res); err != nil {
			b.Fatal(err)
		}
		ids[s] = res.ProcessID
		b.Cleanup(func() { s.end(res.ProcessID) })
		var w jobs.WaitResult
		if _, err := s.call("process.wait", map[string]any{"process_ids": []string{res.ProcessID}, "timeout_ms": 20000,
			"until": map[string]any{"output": map[string]any{"text": "row 23 "}}}, &w); err != nil || w.Met != jobs.MetOutput {
			b.Fatalf("the screen is not drawn: %+v, %v", w, err)
		}
	}
	names := []string{"stdio-screen", "relay-screen", "stdio-output", "relay-output"}
	samples := interleave(b, names, func(j, _ int) (time.Duration, error) {
		s := e.stdio
		if strings.HasPrefix(names[j], "relay") {
			s = e.remote
		}
		if strings.HasSuffix(names[j], "output") {
			var out jobs.Output
			return s.call("process.output", map[string]any{"process_id": ids[s]}, &out)
		}
		var scr jobs.ScreenResult
		d, err := s.call("process.screen", map[string]any{"process_id": ids[s]}, &scr)
		if err == nil && (len(scr.Lines) != 24 || !strings.HasPrefix(scr.Lines[23], "row 23 ")) {
			err = fmt.Errorf("screen %q", scr.Lines)
		}
		return d, err
	})
	b.ReportMetric(0, "ns/op")
	for j, name := range names {
		report(b, name, samples[j])
	}
}
