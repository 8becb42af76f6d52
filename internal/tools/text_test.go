package tools

import (
	"fmt"
	"path"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/commandcore/commandcore/internal/fileops"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/proclist"
	"github.com/commandcore/commandcore/internal/run"
	"github.com/commandcore/commandcore/internal/search"
	"github.com/commandcore/commandcore/internal/textenc"
)

// TestTextSummaries pins each tool's text content: how the job stands or
// what the file call did in a line, then the output or data itself, a
// base64 page named only by its byte count.
func TestTextSummaries(t *testing.T) {
	zero, two, sum := 0, 2, "ab12"
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	now := t0.Add(3 * time.Minute)
	at := func(d time.Duration) *time.Time { t := t0.Add(d); return &t }
	stream := func(observed, dropped int64, last *time.Time) jobmeta.StreamCapture {
		return jobmeta.StreamCapture{ObservedBytes: &observed, DroppedBytes: &dropped, LastOutputAt: last}
	}
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
		{"wait met output", waitText(&jobs.WaitResult{Pending: []string{"p2"}, Met: jobs.MetOutput, Stream: "stderr", Offset: &seven, Line: "listening on :8080"}),
			"job p2 still running\nmet output: the text begins at stderr offset 7, in the line:\nlistening on :8080\n"},
		{"wait met output in a long line", waitText(&jobs.WaitResult{Pending: []string{"p2"}, Met: jobs.MetOutput, Stream: "stdout", Offset: &seven,
			Line: "..." + strings.Repeat("a", 97) + "ready" + strings.Repeat("b", 98) + "..."}),
			"job p2 still running\nmet output: the text begins at stdout offset 7, in the line:\n..." + strings.Repeat("a", 97) + "ready" + strings.Repeat("b", 98) + "...\n"},
		{"wait met output, the line not read", waitText(&jobs.WaitResult{Pending: []string{"p2"}, Met: jobs.MetOutput, Stream: "stderr", Offset: &seven}),
			"job p2 still running\nmet output: the text begins at stderr offset 7\n"},
		{"wait met port", waitText(&jobs.WaitResult{Pending: []string{"p2"}, Met: jobs.MetPort}), "job p2 still running\nmet port\n"},
		{"wait timed out", waitText(&jobs.WaitResult{Pending: []string{"p2"}, Met: jobs.MetTimeout}), "job p2 still running\nmet timeout\n"},
		{"record exited, unread", recordTextAt(&jobmeta.Record{ProcessID: "p1", Name: "build", State: jobmeta.Exited, Terminal: true, ExitCode: &zero,
			StartedAt: at(0), CompletedAt: at(1250 * time.Millisecond),
			Capture: &jobmeta.Capture{Stdout: stream(1258291, 209715, nil), Stderr: stream(0, 0, nil)}}, now),
			"job p1 exited 0 \"build\"\nran 1.25s, ended 2m59s ago\nstdout 1258291 bytes (209715 dropped from the middle); stderr 0 bytes; not yet read to the end\n"},
		{"record stopped, read", recordTextAt(&jobmeta.Record{ProcessID: "p1", State: jobmeta.StoppedByRequest, Terminal: true, Signal: "SIGTERM", StoppedBy: "request",
			StartedAt: at(0), CompletedAt: at(2 * time.Minute), TimeoutS: 600, Read: true,
			Capture: &jobmeta.Capture{Stdout: stream(5, 0, nil), Stderr: jobmeta.StreamCapture{}}}, now),
			"job p1 stopped_by_request by SIGTERM, stopped by request\nran 2m0s, ended 1m0s ago, time limit 600 s\nstdout 5 bytes; stderr size unknown; read to the end\n"},
		{"record running", recordTextAt(&jobmeta.Record{ProcessID: "p1", Name: "server", State: jobmeta.Running, StartedAt: at(0),
			Capture:  &jobmeta.Capture{Stdout: stream(4096, 0, at(170*time.Second)), Stderr: stream(12, 0, at(175*time.Second))},
			Warnings: []string{jobmeta.WarnUserManagerGone}}, now),
			"job p1 running \"server\"\nrunning for 3m0s, last output 5s ago\nstdout 4096 bytes; stderr 12 bytes\nwarnings: user_manager_gone\n"},
		{"record starting", recordTextAt(&jobmeta.Record{ProcessID: "p1", State: jobmeta.Starting}, now), "job p1 starting\nnot started yet\n"},
		{"record failed", recordTextAt(&jobmeta.Record{ProcessID: "p1", State: jobmeta.LaunchFailed, Terminal: true, Error: "exec_failed"}, now),
			"job p1 launch_failed (exec_failed)\n"},
		{"record with survivors", recordTextAt(&jobmeta.Record{ProcessID: "p1", State: jobmeta.WorkerLost, Terminal: true, StartedAt: at(0),
			Survivors: []procid.Identity{{PID: 7}, {PID: 8}}}, now),
			"job p1 worker_lost\n2 processes of its group still run (commandcore jobs reconcile)\n"},
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
		{"files.list", filesListText(&fileops.ListResult{Truncated: true, Unreadable: 1, Entries: []fileops.Entry{
			{Path: "/srv/app/bin", Type: "dir", Size: 4096, Mode: "0755", MTime: t0},
			{Path: "/srv/app/bin/run", Type: "file", Size: 1234, Mode: "4755", MTime: t0.In(time.FixedZone("CEST", 7200))},
			{Path: "/srv/app/current", Type: "symlink", Size: 7, Mode: "0777", MTime: t0, Target: "release"},
			{Path: "/srv/app/tmp", Type: "dir", Size: 60, Mode: "1777", MTime: t0},
			{Path: "/srv/app/a\nb", Type: "fifo", Mode: "0600", MTime: t0},
		}}), "5 entries under /srv/app, more not listed (max_entries); 1 directories could not be read\n" +
			"drwxr-xr-x 4096 2026-05-01T12:00:00Z bin/\n" +
			"-rwsr-xr-x 1234 2026-05-01T12:00:00Z bin/run\n" +
			"lrwxrwxrwx 7 2026-05-01T12:00:00Z current -> release\n" +
			"drwxrwxrwt 60 2026-05-01T12:00:00Z tmp/\n" +
			"prw------- 0 2026-05-01T12:00:00Z \"a\\nb\"\n"},
		{"files.list, one entry", filesListText(&fileops.ListResult{Entries: []fileops.Entry{{Path: "/x", Type: "socket", Mode: "0640", MTime: t0}}}),
			"1 entry in /\nsrw-r----- 0 2026-05-01T12:00:00Z x\n"},
		{"files.list, empty", filesListText(&fileops.ListResult{Entries: []fileops.Entry{}}), "no entries\n"},
		{"files.search", searchText(&search.Result{FilesScanned: 40, DirsScanned: 6, Truncated: true, SkippedBinary: 2, PermissionErrors: 1, Matches: []search.Match{
			{Path: "/srv/app/main.go", Line: 3, Text: "func main() {"},
			{Path: "/srv/app/main.go", Line: 9, Text: "\tmain2()", TextTruncated: true},
			{Path: "/srv/app/main_test.go"},
			{Path: "/srv/app/a\nb", Line: 1, Text: "x\ry"},
		}}), "4 matches in 3 files (40 files and 6 directories scanned); more not listed (max_results); 2 binary files not searched; 1 not readable (permission)\n" +
			"/srv/app/main.go:\n3: func main() {\n9: \tmain2()...\n/srv/app/main_test.go:\n\"/srv/app/a\\nb\":\n1: \"x\\ry\"\n"},
		{"files.search, none", searchText(&search.Result{TimedOut: true, SkippedLarge: 1, OtherErrors: 2}),
			"0 matches in 0 files (0 files and 0 directories scanned); the deadline passed: partial; 1 files over max_file_bytes not read; 2 other errors\n"},
		{"metrics", metricsText(&metrics.Metrics{
			CPU: metrics.CPUMetrics{Count: 8, Load: &metrics.LoadAverage{Load1: 0.5, Load5: 9.25, Load15: 1},
				Usage: &metrics.CPUUsage{BusyPercent: 12.5, UserPercent: 8, SystemPercent: 3, IowaitPercent: 1.5}},
			Memory: &metrics.Memory{TotalBytes: 16 << 30, UsedBytes: u64(4 << 30), AvailableBytes: u64(12 << 30), AvailablePercent: f64(75)},
			Swap:   &metrics.Swap{TotalBytes: 2 << 30, UsedBytes: 512 << 10},
			PSI: metrics.Pressure{Status: metrics.PSIStatusOK, CPU: &metrics.PSI{Some: &metrics.PSIAverages{Avg10: 1.5}},
				Memory: &metrics.PSI{Some: &metrics.PSIAverages{}}, IO: &metrics.PSI{Some: &metrics.PSIAverages{Avg10: 0.25, Avg60: 0.5, Avg300: 0.75}}},
			Disks: []metrics.Disk{
				{MountPoint: "/", FSType: "ext4", Status: "ok", SizeBytes: u64(100 << 30), UsedBytes: u64(95 << 30), AvailableBytes: u64(5 << 30),
					UsedPercent: f64(95), InodesUsedPercent: f64(12.5)},
				{MountPoint: "/boot", FSType: "vfat", ReadOnly: true, Status: "ok", SizeBytes: u64(512 << 20), UsedBytes: u64(100), AvailableBytes: u64(512<<20 - 100)},
				{MountPoint: "/mnt/nfs", FSType: "nfs4", Status: "timeout"},
			},
			DisksTruncated: true,
			UptimeSeconds:  f64(3*86400 + 4*3600 + 12*60 + 30), BootID: "b007",
			Health: metrics.Health{Verdict: metrics.VerdictWarning, Reasons: []metrics.Reason{{Code: metrics.ReasonLoadHigh}, {Code: metrics.ReasonDiskSpaceLow, Subject: "/"}}},
			GPU: &metrics.GPUReport{Status: metrics.GPUStatusOK, GPUs: []metrics.GPU{{Index: 0, Name: "NVIDIA A100", UtilizationPercent: f64(35),
				MemoryUsedBytes: u64(10 << 30), MemoryTotalBytes: u64(40 << 30), TemperatureCelsius: f64(45)}}},
			Errors: []string{"uptime"},
		}), "health warning: load_high, disk_space_low (/)\n" +
			"load 0.50 9.25 1.00 on 8 CPUs; CPU 12.5% busy (user 8.0%, system 3.0%, iowait 1.5%, steal 0.0%)\n" +
			"memory 4.0 GiB used of 16.0 GiB, 12.0 GiB available (75.0%); swap 512.0 KiB used of 2.0 GiB\n" +
			"pressure, some avg10/60/300: cpu 1.50/0.00/0.00% memory 0.00/0.00/0.00% io 0.25/0.50/0.75%\n" +
			"disk / ext4: 95.0 GiB used of 100.0 GiB (95.0%), 5.0 GiB available, inodes 12.5% used\n" +
			"disk /boot vfat read-only: 100 B used of 512.0 MiB, 512.0 MiB available\n" +
			"disk /mnt/nfs nfs4: timeout\n" +
			"(more disks not listed)\n" +
			"up 3d 4h 12m, boot b007\n" +
			"gpu 0 NVIDIA A100: 35% busy, memory 10.0 GiB used of 40.0 GiB, 45°C\n" +
			"not read: uptime\n"},
		{"metrics, little read", metricsText(&metrics.Metrics{CPU: metrics.CPUMetrics{Count: 2}, PSI: metrics.Pressure{Status: metrics.PSIStatusUnavailable},
			Health: metrics.Health{Verdict: metrics.VerdictOK}, GPU: &metrics.GPUReport{Status: metrics.GPUStatusUnavailable, Reason: metrics.GPUReasonNotInstalled},
			Swap: &metrics.Swap{}, Memory: &metrics.Memory{TotalBytes: 1000}, UptimeSeconds: f64(59)}),
			"health ok\n2 CPUs\nmemory 1000 B; no swap\nup 0m\ngpu unavailable (not_installed)\n"},
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

func u64(v uint64) *uint64   { return &v }
func f64(v float64) *float64 { return &v }

// TestFilesListTextStaysUnderTheBound: the default 200 entries, of names
// as long as a file system allows, list whole in a text under
// limits.MaxToolTextChars; the most entries files.list gives, of paths as
// deep as its depth goes, list as many as fit, names cut, and the text
// says how many more the structured result holds.
func TestFilesListTextStaysUnderTheBound(t *testing.T) {
	mtime := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	r := &fileops.ListResult{}
	for i := range limits.FileListEntriesDefault {
		name := fmt.Sprintf("%03d-%s", i, strings.Repeat("é", 126))
		r.Entries = append(r.Entries, fileops.Entry{Path: "/home/u/dir/" + name, Type: "file", Size: 1 << 40, Mode: "0644", MTime: mtime})
	}
	text := filesListText(r)
	if len(text) >= limits.MaxToolTextChars || !utf8.ValidString(text) {
		t.Fatalf("%d bytes of text", len(text))
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != 1+limits.FileListEntriesDefault || lines[0] != "200 entries under /home/u/dir" {
		t.Fatalf("%d lines, the first %q", len(lines), lines[0])
	}
	for i, line := range lines[1:] {
		if !strings.HasSuffix(line, " "+path.Base(r.Entries[i].Path)) {
			t.Fatalf("a 255-byte name is not whole: %.300s", line)
		}
	}

	deep := "/d/" + strings.Repeat(strings.Repeat("x", 255)+"/", limits.FileListDepthMax-1)
	r = &fileops.ListResult{Truncated: true}
	for i := range limits.FileListEntriesMax {
		r.Entries = append(r.Entries, fileops.Entry{Path: fmt.Sprintf("%s%05d", deep, i), Type: "file", Size: 1 << 40, Mode: "0644", MTime: mtime})
	}
	r.Entries = append(r.Entries, fileops.Entry{Path: "/d/x", Type: "dir", Mode: "0755", MTime: mtime})
	text = filesListText(r)
	if len(text) >= limits.MaxToolTextChars || !utf8.ValidString(text) {
		t.Fatalf("%d bytes of text", len(text))
	}
	lines = strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	listed := len(lines) - 2
	if want := fmt.Sprintf("... %d more entries in the structured result", len(r.Entries)-listed); lines[len(lines)-1] != want {
		t.Errorf("the last line %q, want %q", lines[len(lines)-1], want)
	}
	if !strings.HasPrefix(lines[0], "10001 entries under /d, more not listed") || listed < 500 || !strings.HasSuffix(lines[1], "xxx...") {
		t.Errorf("%d entries listed: %q, %q", listed, lines[0], lines[1])
	}
}

// TestSearchTextStaysUnderTheBound: matches past what the text can hold
// are counted, not written, so the text stays under the chat clients'
// bound however many long lines the structured result holds.
func TestSearchTextStaysUnderTheBound(t *testing.T) {
	r := &search.Result{}
	for i := range 2000 {
		r.Matches = append(r.Matches, search.Match{Path: fmt.Sprintf("/src/%0255d", i), Line: i + 1, Text: strings.Repeat("x", 512)})
	}
	text := searchText(r)
	if len(text) > limits.MaxToolTextChars || !strings.Contains(text, " more matches in the structured result\n") {
		t.Fatalf("%d characters, ending %q", len(text), text[max(0, len(text)-80):])
	}
	shown := strings.Count(text, "\n") - 2
	if want := fmt.Sprintf("... %d more matches in the structured result\n", 2000-shown/2); !strings.HasSuffix(text, want) {
		t.Errorf("the text ends %q, want %q", text[len(text)-60:], want)
	}
}
