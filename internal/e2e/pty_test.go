package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/testkit"
)

// awaitOutput pages a job's stdout until it contains want, and returns all
// of it.
func (c *client) awaitOutput(id, want string, timeout time.Duration) string {
	c.t.Helper()
	var all []byte
	var off int64
	testkit.Eventually(c.t, timeout, func() error {
		var out jobs.Output
		c.ok("process.output", map[string]any{"process_id": id, "stdout_offset": off, "wait_ms": 1000}, &out)
		all = append(all, decode(c.t, out.Stdout)...)
		off = out.Stdout.NextOffset
		if strings.Contains(string(all), want) {
			return nil
		}
		if out.Terminal {
			c.t.Fatalf("job output %q never contained %q", all, want)
		}
		return fmt.Errorf("job output %q never contained %q", all, want)
	})
	return string(all)
}

// TestPTYJobRunsOnATerminal: tty names a /dev/pts device, stty size shows
// the requested size, stdin and stdout are terminals, and a resize
// reaches the job as SIGWINCH with the new size; stderr stays empty.
func TestPTYJobRunsOnATerminal(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	script := `tty; stty size; test -t 0 && test -t 1 && test -t 2 && echo all-terminals; echo oops >&2
trap 'echo winch:$(stty size)' WINCH; echo ready; while :; do sleep 0.1; done`
	id := c.start(map[string]any{"command": script, "pty": map[string]any{"cols": 100, "rows": 30}}).ProcessID
	t.Cleanup(func() { c.stopAndWait(id) })
	out := c.awaitOutput(id, "ready", 10*time.Second)
	lines := strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n")
	if !strings.HasPrefix(lines[0], "/dev/pts/") || lines[1] != "30 100" || lines[2] != "all-terminals" || lines[3] != "oops" {
		t.Fatalf("pty job printed %q; want a /dev/pts path, 30 100, all-terminals, its stderr", out)
	}
	var rs jobs.ResizeResult
	c.ok("process.resize", map[string]any{"process_id": id, "cols": 120, "rows": 40}, &rs)
	if rs.Cols != 120 || rs.Rows != 40 {
		t.Fatalf("resize answered %+v", rs)
	}
	c.awaitOutput(id, "winch:40 120", 10*time.Second)
	for _, bad := range [][2]int{{0, 10}, {10, 1001}} {
		if code, _ := c.fail("process.resize", map[string]any{"process_id": id, "cols": bad[0], "rows": bad[1]}); code != "invalid_argument" {
			t.Errorf("resize to %v: %s, want invalid_argument", bad, code)
		}
	}
	var rec struct {
		record
		PTY *struct{ Cols, Rows int } `json:"pty"`
	}
	c.ok("process.status", map[string]any{"process_id": id}, &rec)
	if rec.PTY == nil || rec.PTY.Cols != 100 || rec.PTY.Rows != 30 {
		t.Fatalf("record's pty %+v, want the 100x30 it started with", rec.PTY)
	}
	c.stopAndWait(id)
	var o jobs.Output
	c.ok("process.output", map[string]any{"process_id": id}, &o)
	if o.Stderr.Data != "" || !o.Stderr.EOF {
		t.Fatalf("a pty job's stderr stream: %+v, want empty", o.Stderr)
	}
}

// TestPTYInputAndEOF: input reaches the terminal (and is echoed by it);
// eof on a terminal is end-of-file, which ends cat with exit 0.
func TestPTYInputAndEOF(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	id := c.start(map[string]any{"command": "stty -echo; echo ready; exec cat", "pty": map[string]any{"cols": 80, "rows": 24}}).ProcessID
	t.Cleanup(func() { c.stopAndWait(id) })
	c.awaitOutput(id, "ready", 10*time.Second)
	if got := c.ask(id, "hello\n"); got != "hello\r\n" {
		t.Fatalf("cat on a terminal answered %q, want hello", got)
	}
	c.send(map[string]any{"process_id": id, "eof": true})
	if rec := c.waitTerminal(id, 10*time.Second); rec.State != "exited" || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Fatalf("cat after end-of-file: %s (exit %v), want exited 0", rec.State, rec.ExitCode)
	}
}

// TestPTYStopEscalates: a job on a terminal that ignores SIGTERM is
// killed about 3 s after process.stop, its process group signalled as any
// job's.
func TestPTYStopEscalates(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	id := c.start(map[string]any{"command": "trap '' TERM; echo ready; sleep 60", "pty": map[string]any{"cols": 80, "rows": 24}}).ProcessID
	c.awaitOutput(id, "ready", 10*time.Second)
	asked := time.Now()
	c.ok("process.stop", map[string]any{"process_id": id}, nil)
	rec := c.waitTerminal(id, 20*time.Second)
	if took := time.Since(asked); rec.Signal != "SIGKILL" || took < 3*time.Second {
		t.Fatalf("pty job ended by %q after %v, want SIGKILL no sooner than 3 s", rec.Signal, took)
	}
	if pid := rec.Identity.Child.PID; processExists(pid) {
		t.Fatalf("the job's shell %d still exists", pid)
	}
}

// TestInputToAPythonREPL: python3 -i -q reads expressions from its stdin
// pipe and answers each one; eof ends it with exit 0.
func TestInputToAPythonREPL(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on this machine; TestInputDrivesAREPLAcrossAnMCPCrash drives a shell REPL")
	}
	c := newClient(t, t.TempDir(), nil)
	id := c.start(map[string]any{"command": "exec python3 -u -i -q", "stdin": true}).ProcessID
	t.Cleanup(func() { c.stopAndWait(id) })
	for _, q := range [][2]string{{"6*7\n", "42\n"}, {"'ab'*2\n", "'abab'\n"}, {"print(len('xyz'))\n", "3\n"}} {
		if got := c.ask(id, q[0]); got != q[1] {
			t.Fatalf("python answered %q with %q, want %q", q[0], got, q[1])
		}
	}
	c.send(map[string]any{"process_id": id, "eof": true})
	if rec := c.waitTerminal(id, 10*time.Second); rec.State != "exited" || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Fatalf("python after eof: %s (exit %v), want exited 0", rec.State, rec.ExitCode)
	}
}
