package e2e

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/commandcore/commandcore/internal/jobs"
)

// doubler answers each line with twice its number, and says bye at the end
// of its input: a REPL whose answers prove which input it read.
const doubler = `while IFS= read -r l; do echo "answer:$((l*2))"; done; echo bye`

// send calls process.input and returns its result.
func (c *client) send(args map[string]any) jobs.InputResult {
	c.t.Helper()
	var res jobs.InputResult
	c.ok("process.input", args, &res)
	return res
}

// ask sends line to the job with wait_ms and returns the stdout it answered.
func (c *client) ask(id, line string) string {
	c.t.Helper()
	res := c.send(map[string]any{"process_id": id, "data": line, "wait_ms": 10000})
	if res.AcceptedBytes != len(line) || res.Output == nil {
		c.t.Fatalf("input %q: accepted %d, output %v", line, res.AcceptedBytes, res.Output)
	}
	if res.Output.Stdout.Offset != res.StdoutOffset {
		c.t.Fatalf("answer page starts at %d, the stream stood at %d", res.Output.Stdout.Offset, res.StdoutOffset)
	}
	return string(decode(c.t, res.Output.Stdout))
}

// driveREPL runs the doubler through next, a client that the caller may
// replace between calls, and checks each answer, the end of input and the
// job's exit.
func driveREPL(t *testing.T, c *client, restart func() *client) {
	t.Helper()
	res := c.start(map[string]any{"command": doubler, "stdin": true})
	id := res.ProcessID
	for i, line := range []string{"1\n", "2\n", "3\n"} {
		if got, want := c.ask(id, line), "answer:"+itoa(int64(2*(i+1)))+"\n"; got != want {
			t.Fatalf("answer to %q: %q, want %q", line, got, want)
		}
	}
	c = restart()
	if got := c.ask(id, "21\n"); got != "answer:42\n" {
		t.Fatalf("after the restart, answer %q, want answer:42", got)
	}
	end := c.send(map[string]any{"process_id": id, "eof": true, "wait_ms": 10000})
	if !end.InputClosed || end.Output == nil || string(decode(t, end.Output.Stdout)) != "bye\n" {
		t.Fatalf("eof: %+v", end)
	}
	if rec := c.waitTerminal(id, 10*time.Second); rec.State != "exited" || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Fatalf("REPL ended %s (exit %v), want exited 0", rec.State, rec.ExitCode)
	}
	if code, _ := c.fail("process.input", map[string]any{"process_id": id, "data": "1\n"}); code != "not_running" {
		t.Fatalf("input to an ended job: %s, want not_running", code)
	}
}

// TestInputDrivesAREPLAcrossAnMCPCrash: three inputs get their own
// answers; the `commandcore mcp` is SIGKILLed and a new one sends the next
// input to the same job; eof ends it with exit 0.
func TestInputDrivesAREPLAcrossAnMCPCrash(t *testing.T) {
	s := stdioSide(t)
	driveREPL(t, s.c, restartOf(s))
}

// TestRelayInputDrivesAREPLAcrossAnAgentCrash: the same through the relay,
// with the agent SIGKILLed and restarted between inputs.
func TestRelayInputDrivesAREPLAcrossAnAgentCrash(t *testing.T) {
	s := relaySide(t)
	driveREPL(t, s.c, restartOf(s))
}

// TestInputRefusals: the bound is 64 KiB a call, and a job without stdin,
// an ended job and a closed stdin each get their own code.
func TestInputRefusals(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	sink := c.start(map[string]any{"command": "exec cat >/dev/null", "stdin": true}).ProcessID
	t.Cleanup(func() { c.stopAndWait(sink) })
	full := strings.Repeat("x", 64<<10)
	if res := c.send(map[string]any{"process_id": sink, "data": full}); res.AcceptedBytes != 65536 {
		t.Fatalf("64 KiB input: accepted %d", res.AcceptedBytes)
	}
	for _, bad := range []map[string]any{
		{"process_id": sink, "data": full + "x"},
		{"process_id": sink, "data": "aGk=", "encoding": "latin-1"},
		{"process_id": sink, "data": "not base64!", "encoding": "base64"},
		{"process_id": sink, "data": "x", "wait_ms": 30001},
	} {
		if code, msg := c.fail("process.input", bad); code != "invalid_argument" {
			t.Errorf("input %v: %s %s, want invalid_argument", bad["encoding"], code, msg)
		}
	}
	if code, _ := c.fail("process.resize", map[string]any{"process_id": sink, "cols": 80, "rows": 24}); code != "not_interactive" {
		t.Errorf("resize of a stdin job: %s, want not_interactive", code)
	}
	// base64 input arrives as its bytes.
	if res := c.send(map[string]any{"process_id": sink, "data": "AP8=", "encoding": "base64", "eof": true}); res.AcceptedBytes != 2 || !res.InputClosed {
		t.Fatalf("base64 input with eof: %+v", res)
	}
	if code, _ := c.fail("process.input", map[string]any{"process_id": sink, "data": "x"}); code != "input_closed" && code != "not_running" {
		t.Fatalf("input after eof: %s, want input_closed", code)
	}

	plain := c.start(map[string]any{"command": "sleep 30"}).ProcessID
	t.Cleanup(func() { c.stopAndWait(plain) })
	if code, _ := c.fail("process.input", map[string]any{"process_id": plain, "data": "x"}); code != "not_interactive" {
		t.Errorf("input to a job without stdin: %s, want not_interactive", code)
	}
	// A job that outlives its eof: input after it is input_closed.
	linger := c.start(map[string]any{"command": "cat >/dev/null; sleep 30", "stdin": true}).ProcessID
	t.Cleanup(func() { c.stopAndWait(linger) })
	c.send(map[string]any{"process_id": linger, "eof": true})
	if code, _ := c.fail("process.input", map[string]any{"process_id": linger, "data": "x"}); code != "input_closed" {
		t.Fatalf("input after eof: %s, want input_closed", code)
	}
	for _, size := range [][2]int{{0, 24}, {80, 1001}} {
		if code, _ := c.fail("process.start", map[string]any{"command": "true", "pty": map[string]any{"cols": size[0], "rows": size[1]}}); code != "invalid_argument" {
			t.Errorf("pty %v: %s, want invalid_argument", size, code)
		}
	}
}

// TestInputIsNeverRecorded: a unique marker sent as input is in no file of
// the state directory (journal, metadata, capture of a job that did not
// echo it), and in a job's own output only when the job echoed it.
func TestInputIsNeverRecorded(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state, nil)
	marker := "input-marker-" + uuid.NewString()
	quiet := c.start(map[string]any{"command": "cat >/dev/null", "stdin": true}).ProcessID
	echo := c.start(map[string]any{"command": "cat", "stdin": true}).ProcessID
	for _, id := range []string{quiet, echo} {
		c.send(map[string]any{"process_id": id, "data": marker + "\n", "eof": true})
		c.waitTerminal(id, 10*time.Second)
	}
	c.readAll(echo, 0)
	// The journal is flushed when the server ends.
	c.session.Close()
	c.cmd.Wait()
	echoed := filepath.Join(echo, "stdout.cap")
	seen := false
	filepath.WalkDir(state, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeSocket != 0 {
			return err
		}
		data, rerr := os.ReadFile(path)
		if rerr != nil {
			t.Fatalf("read %s: %v", path, rerr)
		}
		if bytes.Contains(data, []byte(marker)) {
			rel, _ := filepath.Rel(state, path)
			if strings.HasSuffix(rel, echoed) {
				seen = true
			} else {
				t.Errorf("the input marker is in %s", rel)
			}
		}
		return nil
	})
	if !seen {
		t.Fatal("the echoing job's output lacks the marker: the walk proves nothing")
	}
}

// TestInputInFallback: without a user manager the supervisor runs in its
// own session and serves the same input channel.
func TestInputInFallback(t *testing.T) {
	noBus := []string{"DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent/bus", "XDG_RUNTIME_DIR=/nonexistent", "INVOCATION_ID="}
	c := newClient(t, t.TempDir(), noBus)
	res := c.start(map[string]any{"command": doubler, "stdin": true})
	if res.FailureDomain != "shared_parent_cgroup" {
		t.Fatalf("without a user bus: domain %q", res.FailureDomain)
	}
	if got := c.ask(res.ProcessID, "5\n"); got != "answer:10\n" {
		t.Fatalf("fallback REPL answered %q", got)
	}
	c.send(map[string]any{"process_id": res.ProcessID, "eof": true})
	if rec := c.waitTerminal(res.ProcessID, 10*time.Second); rec.State != "exited" {
		t.Fatalf("fallback REPL ended %s", rec.State)
	}
}

// TestJobsInputCLI: `commandcore jobs input ID --eof` delivers its stdin to
// a job a client started, larger than one call, then closes it.
func TestJobsInputCLI(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state, nil)
	id := c.start(map[string]any{"command": "wc -c; echo counted", "stdin": true}).ProcessID
	input := strings.Repeat("0123456789abcdef", 10000) // 160,000 bytes: three calls
	cmd := exec.Command(bin, "jobs", "input", id, "--eof", "--json", "--state-dir", state)
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("jobs input: %v", err)
	}
	var sent struct {
		SentBytes   int64 `json:"sent_bytes"`
		InputClosed bool  `json:"input_closed"`
	}
	if err := json.Unmarshal(out, &sent); err != nil || sent.SentBytes != 160000 || !sent.InputClosed {
		t.Fatalf("jobs input printed %s (%v)", out, err)
	}
	c.waitTerminal(id, 10*time.Second)
	if got := string(c.readAll(id, 0).data[0]); got != "160000\ncounted\n" {
		t.Fatalf("the job read %q, want 160000 bytes counted", got)
	}
	if _, errOut, code := run(t, "jobs", "input", id, "--state-dir", state); code == 0 || !strings.Contains(errOut, "not_running") {
		t.Fatalf("input to an ended job: exit %d, %q", code, errOut)
	}
}
