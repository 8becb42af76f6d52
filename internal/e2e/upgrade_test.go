package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/testkit"
)

// upgradeFrom are the earlier builds whose jobs the current one must keep
// (README "Upgrades"), each the last commit before a change of the job
// files' layout.
var upgradeFrom = []struct{ name, commit string }{
	// Before jobs had owners (job.json "owner") and time limits (timed_out).
	{"before-principals", "07878ce3830f4346a377effe19d4504b7b5e1c67"},
	// Before jobs took input (job.json "stdin", "pty", the input socket).
	{"before-input", "c9465b3f5ce2b21e13116bb10f505658b42451e7"},
}

// buildAt builds commandcore from commit into the user's cache (keyed by
// the commit, which never changes), so a run builds it once and later runs
// not at all. It skips when this clone does not hold the commit.
func buildAt(t *testing.T, commit string) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("upgrade test: not in a git clone (%v); it needs commit %s", err, commit)
	}
	repo := strings.TrimSpace(string(root))
	if err := exec.Command("git", "-C", repo, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		t.Skipf("upgrade test: this clone lacks commit %s (shallow? `git fetch --unshallow` makes it available)", commit)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	out := filepath.Join(cache, "commandcore-e2e", commit, "commandcore")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", repo, commit, src)
	if b, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("check out %s: %v\n%s", commit, err, b)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	// Another test process may be building the same commit.
	tmp := out + ".tmp" + strconv.Itoa(os.Getpid())
	build := exec.Command("go", "build", "-trimpath", "-o", tmp, "./cmd/commandcore")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", commit, err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// oldSession is an MCP session to the earlier build's `commandcore mcp`.
// Its tools predate output schemas, so it is driven without the test
// kit's schema checks.
type oldSession struct {
	t       *testing.T
	cmd     *exec.Cmd
	session interface{ Close() error }
	call    func(tool string, args any, out any)
}

func newOldSession(t *testing.T, exe, state, config string) *oldSession {
	t.Helper()
	cmd := exec.Command(exe, "mcp", "--state-dir", state, "--config-dir", config)
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), testkit.ConnectTimeout)
	defer cancel()
	s, err := testkit.Connect(ctx, "e2e-old", testkit.Stdio(cmd), nil)
	if err != nil {
		t.Fatalf("connect to the earlier build: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return &oldSession{t: t, cmd: cmd, session: s, call: func(tool string, args any, out any) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), testkit.CallTimeout)
		defer cancel()
		raw, isErr, err := testkit.Call(ctx, s, tool, args)
		if err != nil || isErr {
			t.Fatalf("earlier build: %s: %v %s", tool, err, raw)
		}
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				t.Fatalf("earlier build: %s: %v", tool, err)
			}
		}
	}}
}

// jobFiles hashes every file of every job directory under state.
func jobFiles(t *testing.T, state string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	root := filepath.Join(state, "jobs")
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		files, err := os.ReadDir(filepath.Join(root, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if !f.Type().IsRegular() {
				continue
			}
			b, err := os.ReadFile(filepath.Join(root, e.Name(), f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			sums[e.Name()+"/"+f.Name()] = hex.EncodeToString(sum[:])
		}
	}
	return sums
}

// changedFiles lists the files that differ between two snapshots (new,
// gone or rewritten), except those allowed to.
func changedFiles(before, after map[string]string, allowed func(string) bool) []string {
	var changed []string
	for name, sum := range after {
		if before[name] != sum && !allowed(name) {
			changed = append(changed, name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok && !allowed(name) {
			changed = append(changed, name+" (removed)")
		}
	}
	sort.Strings(changed)
	return changed
}

// TestUpgradeKeepsEarlierJobs: jobs an earlier build started (one running,
// one ended, one whose supervisor died) are listed, paged, reconciled and
// stopped by the current build, and starting the agent or `mcp` or listing
// jobs rewrites none of their files.
func TestUpgradeKeepsEarlierJobs(t *testing.T) {
	for _, from := range upgradeFrom {
		t.Run(from.name, func(t *testing.T) { keepsJobsOf(t, buildAt(t, from.commit)) })
	}
}

func keepsJobsOf(t *testing.T, old string) {
	state, config := t.TempDir(), t.TempDir()

	o := newOldSession(t, old, state, config)
	type started struct {
		ProcessID string `json:"process_id"`
		Unit      string `json:"unit"`
	}
	var ended, running, orphan started
	o.call("process.start", map[string]any{"command": "echo old-out; echo old-err >&2; exit 3", "name": "ended"}, &ended)
	o.call("process.start", map[string]any{"command": "echo old-running; exec sleep 300", "name": "running"}, &running)
	o.call("process.start", map[string]any{"command": "echo old-orphan; exec sleep 300", "name": "orphan"}, &orphan)
	for _, j := range []started{running, orphan} {
		unit := j.Unit
		t.Cleanup(func() { exec.Command("systemctl", "--user", "stop", unit).Run() })
		// Earlier builds left their units in the manager's default slice,
		// not commandcore-jobs.slice.
		if s := unitShow(t, unit, "Slice")["Slice"]; s != "app.slice" {
			t.Fatalf("the earlier build's job unit is in %q, want app.slice", s)
		}
	}
	// Both live jobs have written their output and recorded their shell,
	// and the ended one has its result, before the earlier build goes.
	var st struct {
		State    string `json:"state"`
		Terminal bool   `json:"terminal"`
		Identity *struct {
			Supervisor struct {
				PID int `json:"pid"`
			} `json:"supervisor"`
			Child *struct{} `json:"child"`
		} `json:"identity"`
		Capture struct {
			Stdout struct {
				ObservedBytes *int64 `json:"observed_bytes"`
			} `json:"stdout"`
		} `json:"capture"`
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		ready := true
		o.call("process.status", map[string]any{"process_id": ended.ProcessID}, &st)
		ready = ready && st.Terminal
		for _, j := range []started{running, orphan} {
			o.call("process.status", map[string]any{"process_id": j.ProcessID}, &st)
			ready = ready && st.Identity != nil && st.Identity.Child != nil &&
				st.Capture.Stdout.ObservedBytes != nil && *st.Capture.Stdout.ObservedBytes > 0
		}
		if !ready {
			return errors.New("the earlier build's jobs never settled")
		}
		return nil
	})
	o.call("process.status", map[string]any{"process_id": orphan.ProcessID}, &st)
	orphanSupervisor := st.Identity.Supervisor.PID
	o.session.Close()
	before := jobFiles(t, state)

	// Starting the agent (which reconciles every job) and `mcp`, listing
	// and reading status rewrite nothing.
	a := exec.Command(bin, "agent", "--state-dir", state, "--config-dir", config, "--reconcile-every", "100ms")
	a.Stderr = os.Stderr
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	journalHas(t, state, `"agent_start"`)
	time.Sleep(time.Second) // ten reconciliation ticks
	a.Process.Signal(syscall.SIGTERM)
	if err := a.Wait(); err != nil {
		t.Fatalf("the current agent over the earlier build's jobs: %v", err)
	}
	c := newClient(t, state, nil, "--config-dir", config)
	var list struct {
		Jobs []jobmeta.Summary `json:"jobs"`
	}
	c.ok("process.jobs", nil, &list)
	got := map[string]jobmeta.Summary{}
	for _, j := range list.Jobs {
		got[j.ProcessID] = j
	}
	if j := got[ended.ProcessID]; j.State != "exited" || j.ExitCode == nil || *j.ExitCode != 3 || j.Name != "ended" {
		t.Errorf("the earlier build's ended job is listed as %+v, want exited 3", j)
	}
	for _, id := range []string{running.ProcessID, orphan.ProcessID} {
		if j := got[id]; j.State != "running" {
			t.Errorf("the earlier build's live job %s is listed as %+v, want running", id, j)
		}
	}
	for _, id := range []string{ended.ProcessID, running.ProcessID, orphan.ProcessID} {
		c.status(id)
	}
	out, errOut, code := run(t, "jobs", "list", "--json", "--state-dir", state)
	for _, id := range []string{ended.ProcessID, running.ProcessID, orphan.ProcessID} {
		if code != 0 || !strings.Contains(out, id) {
			t.Errorf("jobs list (exit %d) lacks the earlier build's job %s:\n%s%s", code, id, out, errOut)
		}
	}
	if ch := changedFiles(before, jobFiles(t, state), func(string) bool { return false }); len(ch) > 0 {
		t.Fatalf("starting the current build and listing rewrote the earlier build's files: %v", ch)
	}

	// Paging marks a job read (a file of its own) and changes nothing else.
	col := c.readAll(ended.ProcessID, 4)
	if string(col.data[0]) != "old-out\n" || string(col.data[1]) != "old-err\n" || col.pages < 2 {
		t.Errorf("paged %q / %q in %d pages, want old-out / old-err over several", col.data[0], col.data[1], col.pages)
	}
	waitOutput(t, c, running.ProcessID, "old-running")
	// A job from before input channels takes none, and says so.
	if code, _ := c.fail("process.input", map[string]any{"process_id": running.ProcessID, "data": "x"}); code != "not_interactive" {
		t.Errorf("process.input to the earlier build's job: %s, want not_interactive", code)
	}
	isRead := func(name string) bool { return filepath.Base(name) == jobmeta.ReadMarkFile }
	if ch := changedFiles(before, jobFiles(t, state), isRead); len(ch) > 0 {
		t.Fatalf("paging rewrote the earlier build's files: %v", ch)
	}

	// A supervisor of the earlier build that dies is reconciled from its
	// evidence; a live one is stopped through it.
	if err := syscall.Kill(orphanSupervisor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if rec := c.waitTerminal(orphan.ProcessID, 20*time.Second); rec.State != "worker_lost" {
		t.Errorf("the earlier build's job whose supervisor died is %s, want worker_lost", rec.State)
	}
	c.ok("process.stop", map[string]any{"process_id": running.ProcessID}, nil)
	if rec := c.waitTerminal(running.ProcessID, 20*time.Second); rec.State != "stopped_by_request" {
		t.Errorf("the earlier build's running job stopped as %s, want stopped_by_request", rec.State)
	}
	// What the stop, the supervisor's end and the reconciliation write are
	// files of their own; job.json and the claim stay as written.
	ended2 := func(name string) bool {
		switch filepath.Base(name) {
		case jobmeta.StopFile, jobmeta.ResultFile, jobmeta.ReconciledFile, jobmeta.ReadMarkFile,
			jobmeta.StdoutFile, jobmeta.StderrFile:
			return true
		}
		return false
	}
	if ch := changedFiles(before, jobFiles(t, state), ended2); len(ch) > 0 {
		t.Fatalf("stopping and reconciling rewrote the earlier build's files: %v", ch)
	}
}
