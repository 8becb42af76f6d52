package e2e

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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
	if code != 0 || !strings.Contains(out, done.ProcessID) || !strings.Contains(out, "  no    local  cli-test\n") {
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

	// Short IDs: the 8 characters activity prints name the job.
	out, _, code = run(t, "jobs", "show", done.ProcessID[:8], "--state-dir", state)
	if code != 0 || !strings.Contains(out, "process id:      "+done.ProcessID+"\n") || !strings.Contains(out, "owner:           local\n") ||
		!strings.Contains(out, "duration:") || !strings.Contains(out, "read:") {
		t.Fatalf("jobs show %s: exit %d\n%s", done.ProcessID[:8], code, out)
	}
	for _, ref := range []string{"nope", "../x", done.ProcessID[:7]} {
		if _, errOut, code := run(t, "jobs", "show", ref, "--state-dir", state); code != 1 || !strings.Contains(errOut, "no job matches") {
			t.Fatalf("jobs show %s: exit %d %q", ref, code, errOut)
		}
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

// runIn runs the commandcore binary with exactly env and returns stdout,
// stderr and exit code.
func runIn(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
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

// TestReadOnlyCommandsCreateNothing: on a fresh $HOME (HOME and every XDG
// directory in an empty temporary directory), status, activity and jobs
// list create no file; a missing state directory is an error naming it.
func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	home := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_STATE_HOME=" + filepath.Join(home, "state"),
		"XDG_CONFIG_HOME=" + filepath.Join(home, "config"), "XDG_RUNTIME_DIR=" + filepath.Join(home, "run"),
		"XDG_DATA_HOME=" + filepath.Join(home, "data"), "XDG_CACHE_HOME=" + filepath.Join(home, "cache")}
	defaultState := filepath.Join(home, "state", "commandcore")
	created := func(after string) {
		t.Helper()
		filepath.WalkDir(home, func(path string, _ fs.DirEntry, err error) error {
			if path != home {
				t.Errorf("after %s, %s exists", after, path)
			}
			return err
		})
	}
	for _, args := range [][]string{{"jobs", "list"}, {"jobs"}, {"activity", "--last", "1"}, {"jobs", "show", "00000000"}} {
		out, errOut, code := runIn(t, env, args...)
		if code != 1 || out != "" || !strings.Contains(errOut, "state directory "+defaultState+" does not exist") {
			t.Errorf("%v on a fresh $HOME: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
		created(strings.Join(args, " "))
	}
	// status answers (no agent runs here) without creating anything.
	if _, _, code := runIn(t, env, "status"); code != 3 {
		t.Errorf("status on a fresh $HOME: exit %d, want 3", code)
	}
	created("status")
	if _, _, code := runIn(t, env, "status", "--json"); code != 3 {
		t.Errorf("status --json on a fresh $HOME: exit %d, want 3", code)
	}
	created("status --json")

	missing := filepath.Join(home, "nonexistent")
	if out, errOut, code := runIn(t, env, "jobs", "list", "--state-dir", missing); code != 1 || out != "" ||
		!strings.Contains(errOut, missing) {
		t.Errorf("jobs list --state-dir %s: exit %d, stdout %q, stderr %q", missing, code, out, errOut)
	}
	created("jobs list --state-dir")
}
