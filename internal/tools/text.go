package tools

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/commandcore/commandcore/internal/fileops"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/proclist"
	"github.com/commandcore/commandcore/internal/run"
	"github.com/commandcore/commandcore/internal/textenc"
)

// A tool's text content is a short summary for a model to read, with the
// output or data itself, so it does not repeat the structured content in
// full; a tool without one answers its compact JSON (see the table).

// recordText is a record's text content for a model: how the job stands, in a
// line; the structured record carries the rest.
func recordText(r *jobmeta.Record) string {
	s := "job " + r.ProcessID + " " + string(r.State)
	switch {
	case r.ExitCode != nil:
		s += " " + strconv.Itoa(*r.ExitCode)
	case r.Signal != "":
		s += " by " + r.Signal
	}
	if r.StoppedBy != "" {
		s += ", stopped by " + r.StoppedBy
	}
	if r.Error != "" {
		s += " (" + r.Error + ")"
	}
	return s + "\n"
}

// jobsText lists the jobs, a line each.
func jobsText(l *JobList) string {
	var b strings.Builder
	for _, j := range l.Jobs {
		fmt.Fprintf(&b, "job %s %s", j.ProcessID, j.State)
		if j.ExitCode != nil {
			fmt.Fprintf(&b, " %d", *j.ExitCode)
		}
		if j.Name != "" {
			fmt.Fprintf(&b, " %q", j.Name)
		}
		b.WriteByte('\n')
	}
	if len(l.Jobs) == 0 {
		b.WriteString("no managed jobs\n")
	}
	return b.String()
}

// processArgsShare is how much of a process.list text the command lines
// share: one process's shows whole, each of the default 200's 250 bytes,
// so the text stays under limits.MaxToolTextChars however long the
// command lines the structured result holds.
const processArgsShare = limits.MaxToolTextChars / 2

// processListText lists the processes as ps does, a line each: PID,
// parent, user, state, resident KiB, CPU seconds, and the command line (of
// a process without one, its argv[0] or its [name]) with a job's
// process_id; a command line cut ends in "...".
func processListText(r *proclist.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d matching processes", len(r.Processes), r.TotalMatched)
	if r.Truncated {
		fmt.Fprintf(&b, " (limit %d)", r.Limit)
	}
	b.WriteString("\nPID PPID USER S RSS_KIB CPU_S COMMAND\n")
	share := processArgsShare / max(len(r.Processes), 1)
	for _, p := range r.Processes {
		user := p.User
		if user == "" {
			user = strconv.FormatUint(p.UID, 10)
		}
		cmd := p.Args
		switch {
		case cmd == "" && p.Argv0 != "":
			cmd = p.Argv0
		case cmd == "":
			cmd = "[" + p.Name + "]"
		}
		line := clip(cmd, share)
		if p.ArgsTruncated && line == cmd {
			line += "..."
		}
		fmt.Fprintf(&b, "%d %d %s %s %d %.2f %s", p.PID, p.PPID, user, p.State, p.RSSBytes>>10, p.CPUSeconds, line)
		if p.ProcessID != "" {
			fmt.Fprintf(&b, " (job %s)", p.ProcessID)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// forgetText says what was forgotten.
func forgetText(f *Forgotten) string { return "job " + f.ProcessID + " forgotten\n" }

// startText summarises a start.
func startText(r *jobs.StartResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s %s", r.ProcessID, ending(r.State, r.ExitCode, r.Signal))
	if r.Reused {
		b.WriteString(" (started earlier by this idempotency_key)")
	}
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

// outputText summarises an output page.
func outputText(o *jobs.Output) string {
	var b strings.Builder
	// The pages and a line each: one allocation for a full page.
	b.Grow(len(o.Stdout.Data) + len(o.Stderr.Data) + 128)
	fmt.Fprintf(&b, "%s\n", o.State)
	writePages(&b, o.Stdout, o.Stderr)
	return b.String()
}

// inputText summarises an input.
func inputText(r *jobs.InputResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s took %d bytes", r.ProcessID, r.AcceptedBytes)
	if r.InputClosed {
		b.WriteString("; its stdin is closed")
	}
	switch {
	case r.UntilMet == nil:
	case *r.UntilMet:
		b.WriteString("; the until text appeared")
	default:
		b.WriteString("; the until text did not appear within wait_ms")
	}
	b.WriteByte('\n')
	if r.Output != nil {
		fmt.Fprintf(&b, "job %s\n", r.Output.State)
		writePages(&b, r.Output.Stdout, r.Output.Stderr)
	}
	return b.String()
}

// resizeText summarises a resize.
func resizeText(r *jobs.ResizeResult) string {
	return fmt.Sprintf("job %s's terminal is %dx%d\n", r.ProcessID, r.Cols, r.Rows)
}

// screenText shows a screen: a line on the terminal, then its rows.
func screenText(r *jobs.ScreenResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s's screen, %dx%d, cursor at row %d col %d", r.ProcessID, r.Cols, r.Rows, r.Cursor.Row, r.Cursor.Col)
	if r.AlternateScreen {
		b.WriteString(", alternate screen")
	}
	if r.Terminal {
		b.WriteString(", the last one (the job has ended)")
	}
	b.WriteString(":\n")
	for _, l := range r.Lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// waitText summarises a wait.
func waitText(r *jobs.WaitResult) string {
	var b strings.Builder
	for _, rec := range r.Ended {
		fmt.Fprintf(&b, "job %s %s\n", rec.ProcessID, ending(rec.State, rec.ExitCode, rec.Signal))
	}
	for _, id := range r.Pending {
		fmt.Fprintf(&b, "job %s still running\n", id)
	}
	switch r.Met {
	case jobs.MetOutput:
		fmt.Fprintf(&b, "met output: the text begins at %s offset %d\n", r.Stream, *r.Offset)
	case jobs.MetPort, jobs.MetPath, jobs.MetTimeout:
		fmt.Fprintf(&b, "met %s\n", r.Met)
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

// runText summarises a foreground command: how it ended and in how long,
// and whether output was cut, then each stream's retained text (or its
// size as base64), a line where its middle was left out.
func runText(r *run.Result) string {
	var b strings.Builder
	switch {
	case r.TimedOut:
		b.WriteString("timed out")
	case r.Cancelled:
		b.WriteString("cancelled")
	case r.ExitCode != nil:
		fmt.Fprintf(&b, "exited %d", *r.ExitCode)
	default:
		fmt.Fprintf(&b, "ended by %s", r.Signal)
	}
	fmt.Fprintf(&b, " in %d ms", r.DurationMS)
	if r.OutputCapture.Truncated {
		fmt.Fprintf(&b, "; output cut to %d of %d bytes", r.OutputCapture.RetainedBytes, r.OutputCapture.ObservedBytes)
	}
	b.WriteByte('\n')
	for i, s := range []run.StreamOutput{r.Stdout, r.Stderr} {
		if s.Data == "" {
			continue
		}
		name := [...]string{"stdout", "stderr"}[i]
		if s.Encoding == textenc.Base64 {
			fmt.Fprintf(&b, "%s: %d bytes as base64 in the structured result\n", name, base64Len(s.Data))
			continue
		}
		b.WriteString(name + ":\n")
		data := s.Data
		if g := s.Gap; g != nil {
			writeLines(&b, data[:g.From])
			fmt.Fprintf(&b, "[... %d bytes of %s left out ...]\n", g.To-g.From, name)
			data = data[g.From:]
		}
		writeLines(&b, data)
	}
	return b.String()
}

// writeLines writes text on lines of its own.
func writeLines(b *strings.Builder, text string) {
	b.WriteString(text)
	if text != "" && !strings.HasSuffix(text, "\n") {
		b.WriteByte('\n')
	}
}

// writePages writes each stream's page: its range, then its text (or how
// many bytes of base64 the structured content holds).
func writePages(b *strings.Builder, pages ...jobs.StreamPage) {
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

// readText is the range read, then the data (or how much base64 the
// structured result holds).
func readText(r *fileops.ReadResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bytes [%d, %d) of %d, sha256 %s", r.Offset, r.NextOffset, r.Size, hashText(r.SHA256))
	switch {
	case r.EOF:
		b.WriteString(", to the end")
	case r.NextLine > 0:
		fmt.Fprintf(&b, ", next_line %d", r.NextLine)
	default:
		fmt.Fprintf(&b, ", next_offset %d", r.NextOffset)
	}
	if r.Encoding == "base64" {
		b.WriteString(": binary, as base64 in the structured result\n")
		return b.String()
	}
	b.WriteString(":\n" + r.Data)
	return b.String()
}

// writeText summarises a write.
func writeText(r *fileops.WriteResult) string {
	return fmt.Sprintf("wrote %d bytes; the file has %d, sha256 %s\n", r.BytesWritten, r.Size, hashText(r.SHA256))
}

// hashText is a result's sha256 as its text says it.
func hashText(sum *string) string {
	if sum == nil {
		return "not computed (the file is too large to hash)"
	}
	return *sum
}

// editText summarises an edit, with its diff.
func editText(r *fileops.EditResult) string {
	s := fmt.Sprintf("%d replacements; the file has %d bytes, sha256 %s\n", r.Replacements, r.Size, r.SHA256)
	if r.DiffTruncated {
		s += "(diff truncated)\n"
	}
	return s + r.Diff
}
