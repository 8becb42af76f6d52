package tools

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/commandcore/commandcore/internal/fileops"
	"github.com/commandcore/commandcore/internal/humantime"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/proclist"
	"github.com/commandcore/commandcore/internal/run"
	"github.com/commandcore/commandcore/internal/search"
	"github.com/commandcore/commandcore/internal/textenc"
)

// A tool's text content is a short summary for a model to read, with the
// output or data itself, so it does not repeat the structured content in
// full; a tool without one answers its compact JSON (see the table).

// recordText is a record's text content for a model: how the job stands
// or ended, with its name; how long it ran, or has been running; each
// stream's size and what the capture dropped, and whether an ended job's
// output was read to its end; what it runs under. The structured record
// carries the rest.
func recordText(r *jobmeta.Record) string { return recordTextAt(r, time.Now()) }

// recordTextAt is recordText at time now.
func recordTextAt(r *jobmeta.Record, now time.Time) string {
	var b strings.Builder
	b.WriteString("job " + r.ProcessID + " " + ending(r.State, r.ExitCode, r.Signal))
	if r.Name != "" {
		fmt.Fprintf(&b, " %q", r.Name)
	}
	if r.StoppedBy != "" {
		b.WriteString(", stopped by " + r.StoppedBy)
	}
	if r.Error != "" {
		b.WriteString(" (" + r.Error + ")")
	}
	b.WriteByte('\n')
	var when []string
	switch {
	case r.StartedAt == nil && !r.Terminal:
		when = append(when, "not started yet")
	case r.StartedAt == nil:
	case r.CompletedAt != nil:
		when = append(when, "ran "+humantime.Duration(r.CompletedAt.Sub(*r.StartedAt)), "ended "+humantime.Duration(now.Sub(*r.CompletedAt))+" ago")
	case !r.Terminal:
		when = append(when, "running for "+humantime.Duration(now.Sub(*r.StartedAt)))
		if last := lastOutput(r.Capture); last != nil {
			when = append(when, "last output "+humantime.Duration(now.Sub(*last))+" ago")
		}
	}
	if r.TimeoutS > 0 {
		when = append(when, fmt.Sprintf("time limit %d s", r.TimeoutS))
	}
	if len(when) > 0 {
		b.WriteString(strings.Join(when, ", ") + "\n")
	}
	if c := r.Capture; c != nil {
		b.WriteString("stdout " + streamSize(c.Stdout) + "; stderr " + streamSize(c.Stderr))
		switch {
		case !r.Terminal:
		case r.Read:
			b.WriteString("; read to the end")
		default:
			b.WriteString("; not yet read to the end")
		}
		b.WriteByte('\n')
	}
	if len(r.Warnings) > 0 {
		b.WriteString("warnings: " + strings.Join(r.Warnings, ", ") + "\n")
	}
	if n := len(r.Survivors); n > 0 {
		fmt.Fprintf(&b, "%d processes of its group still run (commandcore jobs reconcile)\n", n)
	}
	return b.String()
}

// streamSize is how much a job wrote to a stream, and what of it the
// capture dropped.
func streamSize(s jobmeta.StreamCapture) string {
	if s.ObservedBytes == nil {
		return "size unknown"
	}
	t := fmt.Sprintf("%d bytes", *s.ObservedBytes)
	if s.DroppedBytes != nil && *s.DroppedBytes > 0 {
		t += fmt.Sprintf(" (%d dropped from the middle)", *s.DroppedBytes)
	}
	return t
}

// lastOutput is when the job last wrote to either stream, nil if unknown.
func lastOutput(c *jobmeta.Capture) *time.Time {
	if c == nil {
		return nil
	}
	last := c.Stdout.LastOutputAt
	if t := c.Stderr.LastOutputAt; t != nil && (last == nil || t.After(*last)) {
		last = t
	}
	return last
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
		fmt.Fprintf(&b, "met output: the text begins at %s offset %d", r.Stream, *r.Offset)
		if r.Line != "" {
			b.WriteString(", in the line:\n" + r.Line)
		}
		b.WriteByte('\n')
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

// listNamesShare is how much of a files.list text the names share: each
// of the default 200 entries' 300 bytes, so names of 255 bytes show
// whole; listNameMin is the least a name shows however many entries, and
// listTextBound where the lines stop, the rest left to the structured
// result.
const (
	listNamesShare = limits.MaxToolTextChars * 3 / 5
	listNameMin    = 64
	listTextBound  = limits.MaxToolTextChars - 200
)

// filesListText lists the entries as ls -l does, a line each: type and
// mode, size, mtime (UTC), and the path below the directory they share,
// a directory's ending in "/", a symlink's with its target; a name cut
// ends in "...". Lines stop short of limits.MaxToolTextChars, saying how
// many entries the structured result holds past them.
func filesListText(r *fileops.ListResult) string {
	var b strings.Builder
	dir := commonDir(r.Entries)
	switch len(r.Entries) {
	case 0:
		b.WriteString("no entries")
	case 1:
		fmt.Fprintf(&b, "1 entry in %s", dir)
	default:
		fmt.Fprintf(&b, "%d entries under %s", len(r.Entries), dir)
	}
	if r.Truncated {
		b.WriteString(", more not listed (max_entries)")
	}
	if r.Unreadable > 0 {
		fmt.Fprintf(&b, "; %d directories could not be read", r.Unreadable)
	}
	b.WriteByte('\n')
	share := max(listNamesShare/max(len(r.Entries), 1), listNameMin)
	for i, e := range r.Entries {
		name := strings.TrimPrefix(strings.TrimPrefix(e.Path, dir), "/")
		switch {
		case name == "":
			name = e.Path
		case e.Type == "dir":
			name += "/"
		case e.Type == "symlink" && e.Target != "":
			name += " -> " + e.Target
		}
		name = quoteControl(name)
		line := fmt.Sprintf("%s %d %s %s\n", modeText(e.Type, e.Mode), e.Size, e.MTime.UTC().Format(time.RFC3339), clip(name, share))
		if b.Len()+len(line) > listTextBound {
			fmt.Fprintf(&b, "... %d more entries in the structured result\n", len(r.Entries)-i)
			break
		}
		b.WriteString(line)
	}
	return b.String()
}

// commonDir is the directory every entry's path lies under: the
// directory listed.
func commonDir(entries []fileops.Entry) string {
	if len(entries) == 0 {
		return ""
	}
	dir := path.Dir(entries[0].Path)
	for _, e := range entries[1:] {
		for dir != "/" && dir != "." && !strings.HasPrefix(e.Path, dir+"/") {
			dir = path.Dir(dir)
		}
	}
	return dir
}

// modeText is an entry's type and permissions as ls -l shows them:
// drwxr-xr-x, -rwsr-xr-x.
func modeText(typ, mode string) string {
	letter := map[string]byte{"file": '-', "dir": 'd', "symlink": 'l', "fifo": 'p', "socket": 's', "char_device": 'c', "block_device": 'b'}[typ]
	if letter == 0 {
		letter = '?'
	}
	bits, err := strconv.ParseUint(mode, 8, 32)
	if err != nil {
		return string(letter) + mode
	}
	out := []byte{letter}
	for i, special := range []struct {
		bit       uint64
		set, bare byte
	}{{0o4000, 's', 'S'}, {0o2000, 's', 'S'}, {0o1000, 't', 'T'}} {
		perm := bits >> (3 * (2 - i)) & 7
		out = append(out, "-r"[perm>>2&1], "-w"[perm>>1&1])
		x := "-x"[perm&1]
		if bits&special.bit != 0 {
			x = special.bare
			if perm&1 != 0 {
				x = special.set
			}
		}
		out = append(out, x)
	}
	return string(out)
}

// metricsText summarises the host in a few lines: the health verdict
// and its reasons, load and CPU, memory and swap, pressure, each disk,
// uptime, accelerators when asked for, and what could not be read.
func metricsText(m *metrics.Metrics) string {
	var b strings.Builder
	b.WriteString("health " + m.Health.Verdict)
	for i, r := range m.Health.Reasons {
		if i == 0 {
			b.WriteString(":")
		} else {
			b.WriteString(",")
		}
		b.WriteString(" " + r.Code)
		if r.Subject != "" {
			b.WriteString(" (" + clip(r.Subject, 128) + ")")
		}
	}
	b.WriteByte('\n')
	c := m.CPU
	if c.Load != nil {
		fmt.Fprintf(&b, "load %.2f %.2f %.2f on %d CPUs", c.Load.Load1, c.Load.Load5, c.Load.Load15, c.Count)
	} else {
		fmt.Fprintf(&b, "%d CPUs", c.Count)
	}
	if u := c.Usage; u != nil {
		fmt.Fprintf(&b, "; CPU %.1f%% busy (user %.1f%%, system %.1f%%, iowait %.1f%%, steal %.1f%%)",
			u.BusyPercent, u.UserPercent, u.SystemPercent, u.IowaitPercent, u.StealPercent)
	}
	b.WriteByte('\n')
	if mem := m.Memory; mem != nil {
		b.WriteString("memory ")
		if mem.UsedBytes != nil {
			b.WriteString(sizeText(*mem.UsedBytes) + " used of ")
		}
		b.WriteString(sizeText(mem.TotalBytes))
		if mem.AvailableBytes != nil {
			b.WriteString(", " + sizeText(*mem.AvailableBytes) + " available")
			if mem.AvailablePercent != nil {
				fmt.Fprintf(&b, " (%.1f%%)", *mem.AvailablePercent)
			}
		}
		if sw := m.Swap; sw != nil {
			if sw.TotalBytes == 0 {
				b.WriteString("; no swap")
			} else {
				fmt.Fprintf(&b, "; swap %s used of %s", sizeText(sw.UsedBytes), sizeText(sw.TotalBytes))
			}
		}
		b.WriteByte('\n')
	}
	if p := m.PSI; p.Status == metrics.PSIStatusOK {
		b.WriteString("pressure, some avg10/60/300:")
		for i, s := range []*metrics.PSI{p.CPU, p.Memory, p.IO} {
			if s == nil || s.Some == nil {
				continue
			}
			fmt.Fprintf(&b, " %s %.2f/%.2f/%.2f%%", [...]string{"cpu", "memory", "io"}[i], s.Some.Avg10, s.Some.Avg60, s.Some.Avg300)
		}
		b.WriteByte('\n')
	}
	for _, d := range m.Disks {
		fmt.Fprintf(&b, "disk %s %s", clip(d.MountPoint, 256), d.FSType)
		if d.ReadOnly {
			b.WriteString(" read-only")
		}
		switch {
		case d.Status != "ok":
			b.WriteString(": " + d.Status)
		case d.UsedBytes != nil && d.SizeBytes != nil:
			fmt.Fprintf(&b, ": %s used of %s", sizeText(*d.UsedBytes), sizeText(*d.SizeBytes))
			if d.UsedPercent != nil {
				fmt.Fprintf(&b, " (%.1f%%)", *d.UsedPercent)
			}
			if d.AvailableBytes != nil {
				b.WriteString(", " + sizeText(*d.AvailableBytes) + " available")
			}
			if d.InodesUsedPercent != nil {
				fmt.Fprintf(&b, ", inodes %.1f%% used", *d.InodesUsedPercent)
			}
		}
		b.WriteByte('\n')
	}
	if m.DisksTruncated {
		b.WriteString("(more disks not listed)\n")
	}
	if m.UptimeSeconds != nil {
		b.WriteString("up " + uptimeText(*m.UptimeSeconds))
		if m.BootID != "" {
			b.WriteString(", boot " + m.BootID)
		}
		b.WriteByte('\n')
	}
	if g := m.GPU; g != nil {
		if g.Status != metrics.GPUStatusOK {
			b.WriteString("gpu " + g.Status)
			if g.Reason != "" {
				b.WriteString(" (" + g.Reason + ")")
			}
			b.WriteByte('\n')
		}
		for _, d := range g.GPUs {
			fmt.Fprintf(&b, "gpu %d %s", d.Index, clip(d.Name, 128))
			var parts []string
			if d.UtilizationPercent != nil {
				parts = append(parts, fmt.Sprintf("%.0f%% busy", *d.UtilizationPercent))
			}
			if d.MemoryUsedBytes != nil && d.MemoryTotalBytes != nil {
				parts = append(parts, fmt.Sprintf("memory %s used of %s", sizeText(*d.MemoryUsedBytes), sizeText(*d.MemoryTotalBytes)))
			}
			if d.TemperatureCelsius != nil {
				parts = append(parts, fmt.Sprintf("%.0f°C", *d.TemperatureCelsius))
			}
			if len(parts) > 0 {
				b.WriteString(": " + strings.Join(parts, ", "))
			}
			b.WriteByte('\n')
		}
	}
	if len(m.Errors) > 0 {
		b.WriteString("not read: " + strings.Join(m.Errors, ", ") + "\n")
	}
	return b.String()
}

// sizeText is a byte count as people read one: 512 B, 1.5 KiB, 3.2 GiB.
func sizeText(n uint64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, 0
	for v >= 1024 && unit < 4 {
		v, unit = v/1024, unit+1
	}
	return fmt.Sprintf("%.1f %s", v, [...]string{"KiB", "MiB", "GiB", "TiB", "PiB"}[unit])
}

// uptimeText is an uptime in days, hours and minutes: 3d 4h 12m.
func uptimeText(seconds float64) string {
	m := int64(seconds) / 60
	switch d, h := m/(24*60), m/60%24; {
	case d > 0:
		return fmt.Sprintf("%dd %dh %dm", d, h, m%60)
	case h > 0:
		return fmt.Sprintf("%dh %dm", h, m%60)
	}
	return fmt.Sprintf("%dm", m)
}

// searchText lists the matches as grep -n does, grouped by file: a line
// naming each file, then its matching lines with their numbers (a match on
// the name alone names the file only); a line cut around its match ends
// in "...". The first line counts what was found and scanned and says
// what was left out. Lines stop short of limits.MaxToolTextChars, saying
// how many matches the structured result holds past them.
func searchText(r *search.Result) string {
	var b strings.Builder
	files := 0
	for i, m := range r.Matches {
		if i == 0 || m.Path != r.Matches[i-1].Path {
			files++
		}
	}
	fmt.Fprintf(&b, "%d matches in %d files (%d files and %d directories scanned)", len(r.Matches), files, r.FilesScanned, r.DirsScanned)
	for _, n := range []struct {
		on   bool
		what string
	}{
		{r.Truncated, "more not listed (max_results)"},
		{r.TimedOut, "the deadline passed: partial"},
		{r.SkippedBinary > 0, fmt.Sprintf("%d binary files not searched", r.SkippedBinary)},
		{r.SkippedLarge > 0, fmt.Sprintf("%d files over max_file_bytes not read", r.SkippedLarge)},
		{r.PermissionErrors > 0, fmt.Sprintf("%d not readable (permission)", r.PermissionErrors)},
		{r.OtherErrors > 0, fmt.Sprintf("%d other errors", r.OtherErrors)},
	} {
		if n.on {
			b.WriteString("; " + n.what)
		}
	}
	b.WriteByte('\n')
	for i, m := range r.Matches {
		var line string
		if i == 0 || m.Path != r.Matches[i-1].Path {
			line = quoteControl(m.Path) + ":\n"
		}
		if m.Line > 0 {
			text := m.Text
			if m.TextTruncated {
				text += "..."
			}
			line += fmt.Sprintf("%d: %s\n", m.Line, quoteControl(text))
		}
		if b.Len()+len(line) > listTextBound {
			fmt.Fprintf(&b, "... %d more matches in the structured result\n", len(r.Matches)-i)
			break
		}
		b.WriteString(line)
	}
	return b.String()
}

// quoteControl quotes s when it holds a control character but a tab,
// which would otherwise break the text's lines (a tab, as source code
// indents, stays).
func quoteControl(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return r != '\t' && unicode.IsControl(r) }) {
		return strconv.Quote(s)
	}
	return s
}
