package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/testkit"
)

func TestStopEscalatesToSIGKILL(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	// Both the shell and sleep ignore SIGTERM (an ignored disposition is
	// inherited across exec), so only SIGKILL ends the job.
	res := c.start(map[string]any{"command": `trap '' TERM; echo ready; sleep 120`})
	waitOutput(t, c, res.ProcessID, "ready")
	var stopped record
	begin := time.Now()
	c.ok("process.stop", map[string]any{"process_id": res.ProcessID}, &stopped)
	if stopped.State != "stopping" || stopped.Terminal {
		t.Fatalf("right after process.stop the job is %s (terminal %v), want stopping", stopped.State, stopped.Terminal)
	}
	time.Sleep(time.Second)
	if r := c.status(res.ProcessID); r.State != "stopping" {
		t.Fatalf("a job ignoring SIGTERM is %s one second after the stop, want stopping", r.State)
	}
	rec := c.waitTerminal(res.ProcessID, 20*time.Second)
	took := time.Since(begin)
	if rec.State != "stopped_by_request" || rec.Signal != "SIGKILL" {
		t.Fatalf("job ended %s with signal %q, want stopped_by_request by SIGKILL", rec.State, rec.Signal)
	}
	if took < limits.StopEscalation-500*time.Millisecond {
		t.Fatalf("job ended %v after the stop request, before the SIGKILL escalation", took)
	}
	// The unit's cleanup leaves nothing of the job behind.
	if pid := rec.Identity.Child.PID; processExists(pid) {
		t.Fatalf("the job's shell %d still exists", pid)
	}
}

func TestStopPoliteJob(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	res := c.start(map[string]any{"command": `echo ready; exec sleep 120`})
	waitOutput(t, c, res.ProcessID, "ready")
	c.ok("process.stop", map[string]any{"process_id": res.ProcessID}, nil)
	rec := c.waitTerminal(res.ProcessID, 10*time.Second)
	if rec.State != "stopped_by_request" || rec.Signal != "SIGTERM" {
		t.Fatalf("job ended %s with signal %q, want stopped_by_request by SIGTERM", rec.State, rec.Signal)
	}
	// Stopping a terminal job changes nothing and says so.
	var again record
	c.ok("process.stop", map[string]any{"process_id": res.ProcessID}, &again)
	if again.State != "stopped_by_request" {
		t.Fatalf("stop of a stopped job reports %s", again.State)
	}
}

func TestExitCodeAndSignal(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	res := c.start(map[string]any{"command": "exit 7", "wait_ms": 10000})
	if res.ExitCode == nil || *res.ExitCode != 7 || res.State != "exited" || res.CompletedAt == nil {
		t.Fatalf("exit 7 gave %+v", res)
	}
	res = c.start(map[string]any{"command": "kill -KILL $$", "wait_ms": 10000})
	if res.Signal != "SIGKILL" || res.ExitCode != nil || res.State != "exited" {
		t.Fatalf("a shell killing itself gave %+v", res)
	}
}

func TestAdmissionRefusesThe33rdLiveJob(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	var ids []string
	t.Cleanup(func() {
		for _, id := range ids {
			c.stopAndWait(id)
		}
	})
	for i := 0; i < limits.MaxLiveJobs; i++ {
		ids = append(ids, c.start(map[string]any{"command": "exec sleep 300"}).ProcessID)
	}
	code, msg := c.fail("process.start", map[string]any{"command": "true"})
	if code != "job_table_full" || !strings.Contains(msg, "process.stop") {
		t.Fatalf("33rd job: %s %q, want job_table_full telling the client to stop or poll", code, msg)
	}
	c.ok("process.stop", map[string]any{"process_id": ids[0]}, nil)
	c.waitTerminal(ids[0], 10*time.Second)
	c.start(map[string]any{"command": "true"})
}

func TestRetentionFullAndPrune(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	var ids []string
	for i := 0; i < limits.MaxRetainedTerminalJobs; i++ {
		// No wait_ms: a start that waits returns the final page, which
		// counts as reading it.
		ids = append(ids, c.start(map[string]any{"command": "echo done"}).ProcessID)
	}
	for _, id := range ids {
		if r := c.waitTerminal(id, 10*time.Second); r.Read {
			t.Fatalf("job %s is read before anyone read it", id)
		}
	}
	code, msg := c.fail("process.start", map[string]any{"command": "true"})
	if code != "retention_full" || !strings.Contains(msg, "process.output") || !strings.Contains(msg, "process.forget") {
		t.Fatalf("with 100 unread jobs: %s %q, want retention_full naming process.output and process.forget", code, msg)
	}
	// Reading the final page of one job lets the next launch prune it.
	c.readAll(ids[5], 0)
	c.start(map[string]any{"command": "true"})
	if code, _ := c.fail("process.status", map[string]any{"process_id": ids[5]}); code != "not_found" {
		t.Fatalf("the read job was not pruned: %s", code)
	}
	for _, id := range []string{ids[0], ids[4], ids[6], ids[99]} {
		c.status(id)
	}
	// Forgetting makes room too.
	c.ok("process.forget", map[string]any{"process_id": ids[0]}, nil)
	c.start(map[string]any{"command": "true"})
}

func TestKilledMCPServerLeavesJobRunning(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state, nil)
	res := c.start(map[string]any{"command": `echo before; read -t 600 x < /dev/null; sleep 600`})
	waitOutput(t, c, res.ProcessID, "before")
	c.kill()

	c2 := newClient(t, state, nil)
	var list struct {
		Jobs []record `json:"jobs"`
	}
	c2.ok("process.jobs", map[string]any{}, &list)
	if len(list.Jobs) != 1 || list.Jobs[0].ProcessID != res.ProcessID || list.Jobs[0].State != "running" {
		t.Fatalf("new server lists %+v, want the running job", list.Jobs)
	}
	waitOutput(t, c2, res.ProcessID, "before")
	c2.ok("process.stop", map[string]any{"process_id": res.ProcessID}, nil)
	if rec := c2.waitTerminal(res.ProcessID, 10*time.Second); rec.State != "stopped_by_request" {
		t.Fatalf("job ended %s", rec.State)
	}
}

func TestBadInputTouchesNothing(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state, nil)
	res := c.start(map[string]any{"command": "true", "wait_ms": 5000})
	before := treeSnapshot(t, state)
	cases := []struct {
		tool string
		args map[string]any
		code string
	}{
		{"process.start", map[string]any{"command": "true", "bogus": 1}, "invalid_argument"},
		{"process.start", map[string]any{"command": ""}, "invalid_argument"},
		{"process.start", map[string]any{"command": "true", "wait_ms": 30001}, "invalid_argument"},
		{"process.start", map[string]any{"command": "true", "cwd": "relative/dir"}, "invalid_argument"},
		{"process.start", map[string]any{"command": "true", "cwd": "/nonexistent-dir-for-test"}, "invalid_argument"},
		{"process.start", map[string]any{"command": "true", "env": map[string]any{"A=B": "x"}}, "invalid_argument"},
		{"process.start", map[string]any{"command": 5}, "invalid_argument"},
		{"process.status", map[string]any{"process_id": "../x"}, "invalid_argument"},
		{"process.status", map[string]any{"process_id": "not-a-uuid"}, "invalid_argument"},
		{"process.status", map[string]any{"process_id": strings.ToUpper(res.ProcessID)}, "invalid_argument"},
		{"process.status", map[string]any{"process_id": "00000000-0000-0000-0000-000000000000"}, "not_found"},
		{"process.status", map[string]any{"process_id": res.ProcessID, "extra": true}, "invalid_argument"},
		{"process.output", map[string]any{"process_id": res.ProcessID, "max_bytes": (1 << 20) + 1}, "invalid_argument"},
		{"process.output", map[string]any{"process_id": res.ProcessID, "stdout_offset": -1}, "invalid_argument"},
		{"process.output", map[string]any{"process_id": res.ProcessID, "stdout_offset": 999999}, "invalid_argument"},
		{"process.stop", map[string]any{"process_id": "../../etc"}, "invalid_argument"},
		{"process.forget", map[string]any{"process_id": "../" + res.ProcessID}, "invalid_argument"},
		{"process.jobs", map[string]any{"all": true}, "invalid_argument"},
	}
	for _, tc := range cases {
		if code, msg := c.fail(tc.tool, tc.args); code != tc.code || msg == "" {
			t.Errorf("%s %v: got %s %q, want %s", tc.tool, tc.args, code, msg, tc.code)
		}
	}
	if after := treeSnapshot(t, state); after != before {
		t.Fatalf("bad input changed the state directory:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// An offset past the end says where the stream ends.
	ten := c.start(map[string]any{"command": "printf 0123456789", "wait_ms": 5000})
	if _, msg := c.fail("process.output", map[string]any{"process_id": ten.ProcessID, "stdout_offset": 99999}); msg != "stdout_offset is past the end of the stream (10 bytes)" {
		t.Errorf("an offset past the end: %q", msg)
	}
}

// treeSnapshot lists every file with its size and modification time.
func treeSnapshot(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		// The lock and the activity journal (which records the refused
		// calls, content-free) are expected to change.
		if filepath.Base(p) == ".admission.lock" || strings.HasPrefix(filepath.Base(p), "activity.db") {
			return nil
		}
		b.WriteString(p + " " + fi.Mode().String() + " " + itoa(fi.Size()) + " " + fi.ModTime().String() + "\n")
		return nil
	})
	return b.String()
}

func waitOutput(t *testing.T, c *client, id, want string) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, func() error {
		var out struct {
			Stdout struct{ Data string } `json:"stdout"`
		}
		c.ok("process.output", map[string]any{"process_id": id, "wait_ms": 1000}, &out)
		if seen := out.Stdout.Data; !strings.Contains(seen, want) {
			return fmt.Errorf("job output %q never contained %q", seen, want)
		}
		return nil
	})
}

func processExists(pid int) bool {
	b, err := os.ReadFile("/proc/" + itoa(int64(pid)) + "/stat")
	if err != nil {
		return false
	}
	// A zombie awaiting its reaper is not a running process.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// TestBackgroundChildHoldingThePipe: the shell exits while a child it left
// in the background keeps stdout open. The job ends with the shell; the
// capture says it never reached EOF; the unit's cleanup ends the child.
func TestBackgroundChildHoldingThePipe(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	res := c.start(map[string]any{"command": "sleep 300 & echo $! > /dev/stderr; echo hi"})
	rec := c.waitTerminal(res.ProcessID, 15*time.Second)
	if rec.State != "exited" || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Fatalf("job ended %s exit %v", rec.State, rec.ExitCode)
	}
	if rec.Capture.Stdout.Complete {
		t.Fatal("capture claims EOF although a child still held the pipe")
	}
	col := c.readAll(res.ProcessID, 0)
	if string(col.data[0]) != "hi\n" {
		t.Fatalf("stdout %q", col.data[0])
	}
	pid := 0
	fmt.Sscan(string(col.data[1]), &pid)
	if pid <= 0 {
		t.Fatalf("no background PID on stderr: %q", col.data[1])
	}
	for i := 0; processExists(pid); i++ {
		if i > 250 {
			t.Fatal("the background child outlived its job's unit")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
