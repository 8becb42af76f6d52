package tools

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/commandcore/commandcore/internal/fileops"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/proclist"
	"github.com/commandcore/commandcore/internal/run"
	"github.com/commandcore/commandcore/internal/textenc"
)

// TestTextSummaries pins each tool's text content: how the job stands or
// what the file call did in a line, then the output or data itself, a
// base64 page named only by its byte count.
func TestTextSummaries(t *testing.T) {
	zero, two, sum := 0, 2, "ab12"
	seven, yes := int64(7), true
	done := &jobs.Pages{
		Stdout: jobs.StreamPage{Data: "hi", Encoding: textenc.UTF8, NextOffset: 2, EOF: true},
		Stderr: jobs.StreamPage{Data: "AAECAw==", Encoding: textenc.Base64, NextOffset: 4, EOF: true},
	}
	for _, tc := range []struct {
		name, got, want string
	}{
		{"start running", startText(&jobs.StartResult{ProcessID: "p1", State: jobmeta.Running}), "job p1 running\n"},
		{"start reused", startText(&jobs.StartResult{ProcessID: "p1", State: jobmeta.Running, Reused: true}), "job p1 running (started earlier by this idempotency_key)\n"},
		{"start ended with output", startText(&jobs.StartResult{ProcessID: "p1", State: jobmeta.Exited, ExitCode: &two, Output: done}),
			"job p1 exited 2\nstdout [0, 2):\nhi\nstderr [0, 4): 4 bytes as base64 in the structured result\n"},
		{"start failed on a loaded host", startText(&jobs.StartResult{ProcessID: "p1", State: jobmeta.LaunchFailed, Error: "unit_start_failed",
			HostHealth: &metrics.HostHealth{Verdict: metrics.VerdictCritical, Reasons: []metrics.Reason{{Code: "memory_low"}, {Code: "disk_full"}}}}),
			"job p1 launch_failed (unit_start_failed); host critical: memory_low disk_full\n"},
		{"start on a healthy host", startText(&jobs.StartResult{ProcessID: "p1", State: jobmeta.Running, HostHealth: &metrics.HostHealth{Verdict: metrics.VerdictOK}}),
			"job p1 running\n"},
		{"output with a gap, more to come", outputText(&jobs.Output{State: jobmeta.Running,
			Stdout: jobs.StreamPage{Offset: 10, Data: "tail", Encoding: textenc.UTF8, NextOffset: 30, Gap: &jobs.Gap{From: 10, To: 26}},
			Stderr: jobs.StreamPage{Offset: 5, NextOffset: 5}}),
			"running\nstdout [10, 30) gap [10, 26) more:\ntail\n"},
		{"output, an empty page that ended", outputText(&jobs.Output{State: jobmeta.Exited, Stdout: jobs.StreamPage{EOF: true}, Stderr: jobs.StreamPage{Offset: 3, NextOffset: 3, EOF: true}}),
			"exited\n"},
		{"input", inputText(&jobs.InputResult{ProcessID: "p1", AcceptedBytes: 3}), "job p1 took 3 bytes\n"},
		{"input until met", inputText(&jobs.InputResult{ProcessID: "p1", AcceptedBytes: 3, UntilMet: &yes}), "job p1 took 3 bytes; the until text appeared\n"},
		{"input until not met", inputText(&jobs.InputResult{ProcessID: "p1", AcceptedBytes: 3, UntilMet: new(bool)}), "job p1 took 3 bytes; the until text did not appear within wait_ms\n"},
		{"input closed, with output", inputText(&jobs.InputResult{ProcessID: "p1", AcceptedBytes: 0, InputClosed: true,
			Output: &jobs.Output{State: jobmeta.Exited, Stdout: jobs.StreamPage{Data: "bye\n", Encoding: textenc.UTF8, NextOffset: 4, EOF: true}}}),
			"job p1 took 0 bytes; its stdin is closed\njob exited\nstdout [0, 4):\nbye\n"},
		{"resize", resizeText(&jobs.ResizeResult{ProcessID: "p1", Cols: 120, Rows: 40}), "job p1's terminal is 120x40\n"},
		{"wait", waitText(&jobs.WaitResult{Ended: []*jobmeta.Record{{ProcessID: "p1", State: jobmeta.WorkerLost, Signal: "SIGKILL"}}, Pending: []string{"p2"}}),
			"job p1 worker_lost by SIGKILL\njob p2 still running\n"},
		{"screen", screenText(&jobs.ScreenResult{ProcessID: "p1", Cols: 5, Rows: 2, Lines: []string{"top", ""}, AlternateScreen: true, Terminal: true}),
			"job p1's screen, 5x2, cursor at row 0 col 0, alternate screen, the last one (the job has ended):\ntop\n\n"},
		{"wait met output", waitText(&jobs.WaitResult{Pending: []string{"p2"}, Met: jobs.MetOutput, Stream: "stderr", Offset: &seven}),
			"job p2 still running\nmet output: the text begins at stderr offset 7\n"},
		{"wait met port", waitText(&jobs.WaitResult{Pending: []string{"p2"}, Met: jobs.MetPort}), "job p2 still running\nmet port\n"},
		{"wait timed out", waitText(&jobs.WaitResult{Pending: []string{"p2"}, Met: jobs.MetTimeout}), "job p2 still running\nmet timeout\n"},
		{"record exited", recordText(&jobmeta.Record{ProcessID: "p1", State: jobmeta.Exited, ExitCode: &zero}), "job p1 exited 0\n"},
		{"record stopped", recordText(&jobmeta.Record{ProcessID: "p1", State: jobmeta.StoppedByRequest, Signal: "SIGTERM", StoppedBy: "request"}),
			"job p1 stopped_by_request by SIGTERM, stopped by request\n"},
		{"record failed", recordText(&jobmeta.Record{ProcessID: "p1", State: jobmeta.LaunchFailed, Error: "exec_failed"}), "job p1 launch_failed (exec_failed)\n"},
		{"run exited", runText(&run.Result{ExitCode: &zero, DurationMS: 12, Stdout: run.StreamOutput{Data: "hi", Encoding: textenc.UTF8},
			Stderr: run.StreamOutput{Data: "AAECAw==", Encoding: textenc.Base64}}),
			"exited 0 in 12 ms\nstdout:\nhi\nstderr: 4 bytes as base64 in the structured result\n"},
		{"run killed, cut", runText(&run.Result{Signal: "SIGKILL", DurationMS: 3, Stderr: run.StreamOutput{Data: "oops\n", Encoding: textenc.UTF8},
			OutputCapture: run.Capture{Truncated: true, RetainedBytes: 5, ObservedBytes: 9}}),
			"ended by SIGKILL in 3 ms; output cut to 5 of 9 bytes\nstderr:\noops\n"},
		{"run cut in the middle", runText(&run.Result{ExitCode: &zero, DurationMS: 5, Stdout: run.StreamOutput{Data: "1\n2\n9\n10", Encoding: textenc.UTF8, Gap: &jobs.Gap{From: 4, To: 14}},
			OutputCapture: run.Capture{Truncated: true, RetainedBytes: 7, ObservedBytes: 17}}),
			"exited 0 in 5 ms; output cut to 7 of 17 bytes\nstdout:\n1\n2\n[... 10 bytes of stdout left out ...]\n9\n10\n"},
		{"run timed out", runText(&run.Result{TimedOut: true, Signal: "SIGKILL", DurationMS: 1000}), "timed out in 1000 ms\n"},
		{"run cancelled", runText(&run.Result{Cancelled: true, ExitCode: &two}), "cancelled in 0 ms\n"},
		{"processes", processListText(&proclist.Result{TotalMatched: 3, Truncated: true, Limit: 2, Processes: []proclist.Process{
			{PID: 2, User: "root", Name: "kthreadd", State: "S"},
			{PID: 40, PPID: 1, UID: 1000, Name: "sh", Argv0: "sh", Args: "sh -c make", ArgsTruncated: true, State: "R", RSSBytes: 4 << 20, CPUSeconds: 1.5,
				Managed: true, ProcessID: "p1"},
		}}), "2 of 3 matching processes (limit 2)\nPID PPID USER S RSS_KIB CPU_S COMMAND\n2 0 root S 0 0.00 [kthreadd]\n40 1 1000 R 4096 1.50 sh -c make... (job p1)\n"},
		{"jobs", jobsText(&JobList{Jobs: []jobmeta.Summary{{ProcessID: "p1", State: jobmeta.Exited, ExitCode: &two, Name: "build"}, {ProcessID: "p2", State: jobmeta.Running}}}),
			"job p1 exited 2 \"build\"\njob p2 running\n"},
		{"no jobs", jobsText(&JobList{}), "no managed jobs\n"},
		{"forget", forgetText(&Forgotten{ProcessID: "p1", Forgotten: true}), "job p1 forgotten\n"},
		{"read to the end", readText(&fileops.ReadResult{Offset: 0, NextOffset: 3, Size: 3, SHA256: &sum, EOF: true, Data: "abc", Encoding: textenc.UTF8}),
			"bytes [0, 3) of 3, sha256 ab12, to the end:\nabc"},
		{"read by lines", readText(&fileops.ReadResult{Offset: 0, NextOffset: 4, Size: 9, SHA256: &sum, NextLine: 3, Data: "a\nb\n", Encoding: textenc.UTF8}),
			"bytes [0, 4) of 9, sha256 ab12, next_line 3:\na\nb\n"},
		{"read binary, unhashed", readText(&fileops.ReadResult{Offset: 2, NextOffset: 6, Size: 9, Data: "AAECAw==", Encoding: textenc.Base64}),
			"bytes [2, 6) of 9, sha256 not computed (the file is too large to hash), next_offset 6: binary, as base64 in the structured result\n"},
		{"write", writeText(&fileops.WriteResult{BytesWritten: 3, Size: 10, SHA256: &sum}), "wrote 3 bytes; the file has 10, sha256 ab12\n"},
		{"edit", editText(&fileops.EditResult{Replacements: 2, Size: 7, SHA256: "ab12", Diff: "-a\n+b\n"}), "2 replacements; the file has 7 bytes, sha256 ab12\n-a\n+b\n"},
		{"edit, diff cut", editText(&fileops.EditResult{Replacements: 1, Size: 7, SHA256: "ab12", Diff: "-a\n", DiffTruncated: true}),
			"1 replacements; the file has 7 bytes, sha256 ab12\n(diff truncated)\n-a\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("text\n%q\nwant\n%q", tc.got, tc.want)
			}
		})
	}
}

// TestBase64LenCountsPadding pins the byte count a base64 page's text
// names: padding holds no bytes.
func TestBase64LenCountsPadding(t *testing.T) {
	for d, want := range map[string]int{"": 0, "AA==": 1, "AAA=": 2, "AAAA": 3, "AAAAAA==": 4} {
		if got := base64Len(d); got != want {
			t.Errorf("base64Len(%q) = %d, want %d", d, got, want)
		}
	}
}

// TestProcessListTextStaysUnderTheBound: the default 200 processes, each
// with a command line as long as process.list keeps, list in a text under
// limits.MaxToolTextChars, each command line cut to its share; one alone
// shows whole.
func TestProcessListTextStaysUnderTheBound(t *testing.T) {
	long := strings.Repeat("é", limits.ProcessArgsMaxBytes/2)
	r := &proclist.Result{TotalMatched: 200, Limit: 200}
	for i := range 200 {
		r.Processes = append(r.Processes, proclist.Process{PID: 100000 + i, PPID: 99999, User: "a-rather-long-user-name", State: "S",
			RSSBytes: 1 << 40, CPUSeconds: 123456.78, Args: long, ArgsTruncated: true, Managed: true, ProcessID: "7d3c9f2e-0000-4000-8000-000000000000"})
	}
	text := processListText(r)
	if len(text) >= limits.MaxToolTextChars || !utf8.ValidString(text) {
		t.Fatalf("%d bytes of text", len(text))
	}
	for _, line := range strings.Split(text, "\n")[2:200] {
		if !strings.Contains(line, "é... (job ") {
			t.Fatalf("a long command line is not cut: %.300s", line)
		}
	}
	r.Processes = r.Processes[:1]
	if text := processListText(r); !strings.Contains(text, long+"... (job ") {
		t.Errorf("one process's command line is cut: %.300s", text)
	}
}
