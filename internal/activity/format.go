package activity

import (
	"fmt"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/humantime"
)

// Format renders one event as a human line in local time (humantime):
//
//	Fri 2026-05-01 14:03:22 UTC  launch_phase  unit_start      1a2b3c4d  failed  35ms  unit_start_failed
//
// Columns: time, kind, subject (tool, phase, link-end reason, state), the
// job ID's first eight digits, outcome, duration, error code. Empty columns
// print "-". The line is built from sanitised values only.
func Format(e Event) string {
	e = sanitize(e)
	subject := joinNonEmpty("/", string(e.Tool), string(e.Phase), string(e.Reason), e.State)
	job := "-"
	if e.JobID != "" {
		job = e.JobID[:8]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-12s  %-16s  %-8s  %-7s  %7s",
		humantime.Time(e.Time),
		string(e.Kind), dash(subject), job, dash(string(e.Outcome)), formatDuration(e.DurationMS))
	if e.ErrorCode != "" {
		b.WriteString("  ")
		b.WriteString(e.ErrorCode)
	}
	return strings.TrimRight(b.String(), " ")
}

func joinNonEmpty(sep string, vs ...string) string {
	var parts []string
	for _, v := range vs {
		if v != "" {
			parts = append(parts, v)
		}
	}
	return strings.Join(parts, sep)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatDuration prints milliseconds as humantime does: 35ms, 1.25s, 3m20s.
func formatDuration(ms int64) string {
	const maxMS = int64(1<<63-1) / int64(time.Millisecond)
	return humantime.Duration(time.Duration(min(ms, maxMS)) * time.Millisecond)
}
