package e2e

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/testkit"
)

// run runs the commandcore binary and returns stdout, stderr and exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	}
	t.Fatalf("run %v: %v", args, err)
	return "", "", -1
}

func TestJobsCLI(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state, nil)
	done := c.start(map[string]any{"command": "echo out; echo err >&2; exit 4", "name": "cli-test"})
	c.waitTerminal(done.ProcessID, 10*time.Second)
	live := c.start(map[string]any{"command": "echo ready; exec sleep 120"})
	waitOutput(t, c, live.ProcessID, "ready")

	out, _, code := run(t, "jobs", "list", "--json", "--state-dir", state)
	list, err := testkit.DecodeLines[record]([]byte(out))
	if code != 0 || err != nil || len(list) != 2 {
		t.Fatalf("jobs list --json: exit %d, %q", code, out)
	}
	if list[0].ProcessID != live.ProcessID || list[0].State != "running" || list[1].State != "exited" || *list[1].ExitCode != 4 {
		t.Fatalf("jobs list not newest first with states: %+v", list)
	}
	out, _, code = run(t, "jobs", "--state-dir", state)
	if code != 0 || !strings.Contains(out, done.ProcessID) || !strings.Contains(out, "cli-test") || !strings.Contains(out, "unread") {
		t.Fatalf("jobs (human): exit %d\n%s", code, out)
	}
	out, _, code = run(t, "jobs", "show", done.ProcessID, "--state-dir", state)
	if code != 0 || !strings.Contains(out, "exit code:") || !strings.Contains(out, "4") {
		t.Fatalf("jobs show: exit %d\n%s", code, out)
	}
	stdout, stderr, code := run(t, "jobs", "output", done.ProcessID, "--state-dir", state)
	if code != 0 || stdout != "out\n" || stderr != "err\n" {
		t.Fatalf("jobs output: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if !c.status(done.ProcessID).Read {
		t.Error("reading the whole output with the CLI did not mark the job read")
	}
	out, _, code = run(t, "jobs", "stop", live.ProcessID, "--state-dir", state)
	if code != 0 || !strings.Contains(out, "stopping") && !strings.Contains(out, "stopped_by_request") {
		t.Fatalf("jobs stop: exit %d %q", code, out)
	}
	if r := c.waitTerminal(live.ProcessID, 10*time.Second); r.State != "stopped_by_request" {
		t.Fatalf("stopped from the CLI: %s", r.State)
	}

	if _, errOut, code := run(t, "jobs", "show", "../x", "--state-dir", state); code != 1 || !strings.Contains(errOut, "invalid_argument") {
		t.Fatalf("jobs show ../x: exit %d %q", code, errOut)
	}
	if _, _, code := run(t, "jobs", "show", "--state-dir", state); code != 2 {
		t.Fatalf("jobs show without an ID: exit %d, want 2", code)
	}
	if _, _, code := run(t, "no-such-command"); code != 2 {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}
	if out, _, code := run(t, "version"); code != 0 || !strings.HasPrefix(out, "commandcore ") {
		t.Fatalf("version: exit %d %q", code, out)
	}
}
