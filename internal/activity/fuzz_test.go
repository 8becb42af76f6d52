package activity

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/humantime"
)

func FuzzEventSanitize(f *testing.F) {
	f.Add("tool_call", "process.start", jobA, "unit_start", "ok", "internal", "exited", "send_timeout", int64(5))
	f.Add("MARKER", "/bin/sh -c rm", "0F8E7D6C-5B4A-4392-8170-6F5E4D3C2B1A", "", "OK", "not found", "", "\x1b[2J", int64(-1))
	f.Add("", "", "0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1", "x", "failed", "", "corrupt", "", int64(1<<62))
	f.Fuzz(func(t *testing.T, kind, tool, job, phase, outcome, code, state, reason string, dur int64) {
		in := Event{Time: time.Unix(0, dur), Kind: Kind(kind), Tool: Tool(tool), JobID: job, Phase: Phase(phase),
			Outcome: Outcome(outcome), ErrorCode: code, State: state, Reason: Reason(reason), DurationMS: dur}
		out := sanitize(in)
		ok := func(field, v string, allowed bool, mayBeEmpty bool) {
			if v == Other || allowed || (mayBeEmpty && v == "") {
				return
			}
			t.Fatalf("%s = %q not allowlisted", field, v)
		}
		k := slices.Contains(kinds, out.Kind)
		ok("kind", string(out.Kind), k, false)
		a := slices.Contains(tools, out.Tool)
		ok("tool", string(out.Tool), a, true)
		a = slices.Contains(phases, out.Phase)
		ok("phase", string(out.Phase), a, true)
		a = slices.Contains(outcomes, out.Outcome)
		ok("outcome", string(out.Outcome), a, true)
		a = slices.Contains(errorCodes, out.ErrorCode)
		ok("error_code", out.ErrorCode, a, true)
		a = slices.Contains(states, out.State)
		ok("state", out.State, a, true)
		a = slices.Contains(reasons, out.Reason)
		ok("reason", string(out.Reason), a, true)
		if out.JobID != "" && (out.JobID != job || canonicalJobID(out.JobID) != out.JobID) {
			t.Fatalf("job_id %q from %q", out.JobID, job)
		}
		if len(out.JobID) != 0 && len(out.JobID) != 36 {
			t.Fatalf("job_id %q", out.JobID)
		}
		if out.DurationMS < 0 || (dur >= 0 && out.DurationMS != dur) {
			t.Fatalf("duration %d from %d", out.DurationMS, dur)
		}
		// Values that were allowed are kept unchanged; sanitising is idempotent.
		if slices.Contains(tools, Tool(tool)) && out.Tool != Tool(tool) {
			t.Fatalf("allowed tool %q changed to %q", tool, out.Tool)
		}
		if again := sanitize(out); again != out {
			t.Fatalf("not idempotent: %+v then %+v", out, again)
		}
		// The human line carries nothing but allowlisted words either.
		checkLine(t, Format(in))
	})
}

var durationRE = regexp.MustCompile(`^([0-9]+ms|[0-9hms.]+)$`)

// checkLine checks every token of a Format line after the time, which
// takes four fields (weekday, date, time, zone).
func checkLine(t *testing.T, line string) {
	f := strings.Fields(line)
	if len(f) < 4 {
		t.Fatalf("line %q has no time", line)
	}
	if _, err := time.Parse(humantime.Layout, strings.Join(f[:4], " ")); err != nil {
		t.Fatalf("line %q: time: %v", line, err)
	}
	f = f[2:]
	if len(f) < 7 || len(f) > 8 {
		t.Fatalf("line %q has %d fields", line, len(f))
	}
	words := []string{f[2], f[5]}
	if f[3] != "-" {
		words = append(words, strings.Split(f[3], "/")...)
	}
	if len(f) == 8 {
		words = append(words, f[7])
	}
	for _, w := range words {
		if w != "-" && !isAllowlistedAnywhere(w) {
			t.Fatalf("line %q: %q not allowlisted", line, w)
		}
	}
	if f[4] != "-" && (len(f[4]) != 8 || canonicalJobID(f[4]+jobA[8:]) == "") {
		t.Fatalf("line %q: job %q", line, f[4])
	}
	if !durationRE.MatchString(f[6]) {
		t.Fatalf("line %q: duration %q", line, f[6])
	}
}

func isAllowlistedAnywhere(s string) bool {
	a := slices.Contains(kinds, Kind(s))
	b := slices.Contains(tools, Tool(s))
	c := slices.Contains(phases, Phase(s))
	d := slices.Contains(errorCodes, s)
	e := slices.Contains(states, s)
	f := slices.Contains(reasons, Reason(s))
	g := slices.Contains(outcomes, Outcome(s))
	return a || b || c || d || e || f || g || s == Other
}
