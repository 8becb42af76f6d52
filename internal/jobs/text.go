package jobs

import (
	"fmt"
	"strings"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/textenc"
)

// The Text methods are each result's text content: a short summary for a
// model to read, with the output itself; the structured content carries
// every field.

// Text summarises a start.
func (r *StartResult) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s %s", r.ProcessID, ending(r.State, r.ExitCode, r.Signal))
	if r.Error != "" {
		fmt.Fprintf(&b, " (%s)", r.Error)
	}
	if h := r.HostHealth; h != nil && h.Verdict != metrics.VerdictOK {
		fmt.Fprintf(&b, "; host %s:", h.Verdict)
		for _, reason := range h.Reasons {
			b.WriteString(" " + reason.Code)
		}
	}
	b.WriteByte('\n')
	if r.Output != nil {
		writePages(&b, r.Output.Stdout, r.Output.Stderr)
	}
	return b.String()
}

// Text summarises an output page.
func (o *Output) Text() string {
	var b strings.Builder
	// The pages and a line each: one allocation for a full page.
	b.Grow(len(o.Stdout.Data) + len(o.Stderr.Data) + 128)
	fmt.Fprintf(&b, "%s\n", o.State)
	writePages(&b, o.Stdout, o.Stderr)
	return b.String()
}

// Text summarises an input.
func (r *InputResult) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s took %d bytes", r.ProcessID, r.AcceptedBytes)
	if r.InputClosed {
		b.WriteString("; its stdin is closed")
	}
	b.WriteByte('\n')
	if r.Output != nil {
		fmt.Fprintf(&b, "job %s\n", r.Output.State)
		writePages(&b, r.Output.Stdout, r.Output.Stderr)
	}
	return b.String()
}

// Text summarises a resize.
func (r *ResizeResult) Text() string {
	return fmt.Sprintf("job %s's terminal is %dx%d\n", r.ProcessID, r.Cols, r.Rows)
}

// Text summarises a wait.
func (r *WaitResult) Text() string {
	var b strings.Builder
	for _, rec := range r.Ended {
		fmt.Fprintf(&b, "job %s %s\n", rec.ProcessID, ending(rec.State, rec.ExitCode, rec.Signal))
	}
	for _, id := range r.Pending {
		fmt.Fprintf(&b, "job %s still running\n", id)
	}
	return b.String()
}

// ending says how a job stands or ended, e.g. "exited 0", "killed by
// SIGKILL", "running".
func ending(state jobmeta.State, code *int, signal string) string {
	switch {
	case code != nil:
		return fmt.Sprintf("%s %d", state, *code)
	case signal != "":
		return fmt.Sprintf("%s by %s", state, signal)
	}
	return string(state)
}

// writePages writes each stream's page: its range, then its text (or how
// many bytes of base64 the structured content holds).
func writePages(b *strings.Builder, pages ...StreamPage) {
	for i, p := range pages {
		name := [...]string{"stdout", "stderr"}[i]
		if p.Data == "" && p.Gap == nil && p.Offset == p.NextOffset {
			continue
		}
		fmt.Fprintf(b, "%s [%d, %d)", name, p.Offset, p.NextOffset)
		if p.Gap != nil {
			fmt.Fprintf(b, " gap [%d, %d)", p.Gap.From, p.Gap.To)
		}
		if !p.EOF {
			b.WriteString(" more")
		}
		if p.Encoding == textenc.Base64 {
			fmt.Fprintf(b, ": %d bytes as base64 in the structured result\n", base64Len(p.Data))
			continue
		}
		b.WriteString(":\n")
		b.WriteString(p.Data)
		if !strings.HasSuffix(p.Data, "\n") {
			b.WriteByte('\n')
		}
	}
}

// base64Len is how many bytes padded base64 text d holds.
func base64Len(d string) int {
	return len(d)/4*3 - (len(d) - len(strings.TrimRight(d, "=")))
}
