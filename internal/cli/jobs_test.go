package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/capture"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/testkit"
)

const (
	doneJob = "00000000-0000-4000-8000-000000000001"
	liveJob = "00000000-0000-4000-8000-000000000002"
)

// jobsFixture is a state directory with two jobs written as a launcher
// and a supervisor leave them: doneJob exited 4 after printing "out" and
// "err"; liveJob is newer and runs, its supervisor a real sleep process.
type jobsFixture struct {
	state string
	sleep *exec.Cmd
}

func newJobsFixture(t *testing.T) *jobsFixture {
	t.Helper()
	f := &jobsFixture{state: t.TempDir()}
	created := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	code := 4
	f.job(t, doneJob, "cli-test", created)
	f.owner(t, doneJob, "ci-bot")
	started := created.Add(250 * time.Millisecond)
	f.write(t, doneJob, jobmeta.ClaimFile, &jobmeta.Claim{Schema: jobmeta.SchemaVersion, ClaimedAt: started, StartedAt: &started,
		Supervisor: procid.Identity{PID: 1 << 22, StartTicks: 1}, BootID: "gone"})
	captured := jobmeta.Capture{Stdout: f.capture(t, doneJob, jobmeta.StdoutFile, "out\n"), Stderr: f.capture(t, doneJob, jobmeta.StderrFile, "err\n")}
	f.write(t, doneJob, jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, ExitCode: &code,
		CompletedAt: created.Add(1500 * time.Millisecond), Capture: captured})

	f.sleep = exec.Command("sleep", "120")
	if err := f.sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.sleep.Process.Kill(); f.sleep.Wait() })
	procs := procid.Default()
	sup, _, err := procs.Lookup(f.sleep.Process.Pid)
	boot, berr := procs.BootID()
	if err != nil || berr != nil {
		t.Fatalf("sleep's identity: %v %v", err, berr)
	}
	f.job(t, liveJob, "", created.Add(time.Minute))
	f.write(t, liveJob, jobmeta.ClaimFile, &jobmeta.Claim{Schema: jobmeta.SchemaVersion, Supervisor: sup, BootID: boot, ClaimedAt: created})
	return f
}

func (f *jobsFixture) dir(id string) string { return filepath.Join(f.state, "jobs", id) }

func (f *jobsFixture) write(t *testing.T, id, name string, v any) {
	t.Helper()
	if err := atomicfile.WriteJSON(filepath.Join(f.dir(id), name), v); err != nil {
		t.Fatal(err)
	}
}

func (f *jobsFixture) job(t *testing.T, id, name string, created time.Time) {
	t.Helper()
	if err := os.MkdirAll(f.dir(id), 0o700); err != nil {
		t.Fatal(err)
	}
	f.write(t, id, jobmeta.JobFile, &jobmeta.Job{Schema: jobmeta.SchemaVersion, ID: id, Name: name,
		FailureDomain: jobmeta.DomainSharedParentCgroup, CreatedAt: created})
}

// owner records who started job id.
func (f *jobsFixture) owner(t *testing.T, id, who string) {
	t.Helper()
	j, err := jobmeta.Read[jobmeta.Job](filepath.Join(f.dir(id), jobmeta.JobFile))
	if err != nil {
		t.Fatal(err)
	}
	j.Owner = who
	f.write(t, id, jobmeta.JobFile, j)
}

// capture writes a sealed capture file, as the supervisor leaves it, and
// returns the counters it puts in the result.
func (f *jobsFixture) capture(t *testing.T, id, name, data string) jobmeta.StreamCapture {
	t.Helper()
	w, err := capture.Create(filepath.Join(f.dir(id), name))
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(data))
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return jobmeta.StreamCaptureOf(w.Meta())
}

// options returns jobs options over the fixture that write to out and errOut.
func (f *jobsFixture) options(asJSON bool, out, errOut *bytes.Buffer) jobsOptions {
	g := &globalFlags{stateDir: f.state, configDir: filepath.Join(f.state, "config")}
	return jobsOptions{IO: IO{Out: out, Err: errOut}, JSON: asJSON, Jobs: func() (*jobs.Service, error) { return openJobs(g, IO{Err: errOut}) }}
}

func TestJobsList(t *testing.T) {
	f := newJobsFixture(t)
	var out, errOut bytes.Buffer
	if err := runJobsList(&jobsListOptions{f.options(false, &out, &errOut)}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	created := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC).Local().Format("Mon 2006-01-02 15:04:05 MST")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "PROCESS ID") || !strings.HasPrefix(lines[1], liveJob+"  running") ||
		!strings.HasPrefix(lines[2], doneJob+"  exited") || !strings.Contains(lines[2], " 4 ") ||
		!strings.Contains(lines[2], "  "+created+"  no    ci-bot  cli-test") {
		t.Fatalf("jobs list (want READ no, OWNER ci-bot, created %s):\n%s", created, out.String())
	}

	out.Reset()
	if err := runJobsList(&jobsListOptions{f.options(true, &out, &errOut)}); err != nil {
		t.Fatal(err)
	}
	list, err := testkit.DecodeLines[jobmeta.Summary](out.Bytes())
	if err != nil || len(list) != 2 || list[0].ProcessID != liveJob || list[0].State != jobmeta.Running ||
		list[1].ProcessID != doneJob || list[1].ExitCode == nil || *list[1].ExitCode != 4 {
		t.Fatalf("jobs list --json (%v):\n%s", err, out.String())
	}
	if errOut.Len() != 0 {
		t.Errorf("stderr: %q", errOut.String())
	}
}

func TestJobsListEmptyPrintsNoJSONLines(t *testing.T) {
	var out bytes.Buffer
	f := &jobsFixture{state: t.TempDir()}
	if err := runJobsList(&jobsListOptions{f.options(true, &out, &out)}); err != nil || out.Len() != 0 {
		t.Fatalf("no jobs: %v, output %q", err, out.String())
	}
}

func TestJobsShow(t *testing.T) {
	f := newJobsFixture(t)
	var out, errOut bytes.Buffer
	if err := runJobsShow(&jobsShowOptions{f.options(false, &out, &errOut), doneJob}); err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) string {
		return time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC).Add(d).Local().Format("Mon 2006-01-02 15:04:05 MST")
	}
	for _, want := range []string{"process id:      " + doneJob, "name:            cli-test", "state:           exited",
		"owner:           ci-bot", "created:         " + at(0), "started:         " + at(250*time.Millisecond),
		"completed:       " + at(1500*time.Millisecond), "duration:        1.25s",
		"exit code:       4", "stdout:          4 bytes", "stderr:          4 bytes"} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("jobs show lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if err := runJobsShow(&jobsShowOptions{f.options(true, &out, &errOut), doneJob}); err != nil {
		t.Fatal(err)
	}
	var rec jobmeta.Record
	if !strings.HasPrefix(out.String(), "{\n  \"") || json.Unmarshal(out.Bytes(), &rec) != nil || rec.ProcessID != doneJob ||
		rec.ExitCode == nil || *rec.ExitCode != 4 || rec.Read {
		t.Fatalf("jobs show --json is not the indented record:\n%s", out.String())
	}

	err := runJobsShow(&jobsShowOptions{f.options(false, &out, &errOut), "00000000-0000-4000-8000-000000000009"})
	if errcode.From(err).Code != errcode.NotFound {
		t.Fatalf("an unknown job: %v", err)
	}
}

func TestJobsOutput(t *testing.T) {
	f := newJobsFixture(t)
	var out, errOut bytes.Buffer
	o := &jobsOutputOptions{jobsOptions: f.options(true, &out, &errOut), Ctx: context.Background(),
		Request: jobs.OutputRequest{ProcessID: doneJob, MaxBytes: 2}}
	if err := runJobsOutput(o); err != nil {
		t.Fatal(err)
	}
	var page jobs.Output
	if json.Unmarshal(out.Bytes(), &page) != nil || page.Stdout.Data != "ou" || page.Stdout.NextOffset != 2 || page.Stdout.EOF ||
		page.Stderr.Data != "er" {
		t.Fatalf("jobs output --json --max-bytes 2:\n%s", out.String())
	}

	// Without --json it pages to the end, stdout to stdout and stderr to
	// stderr, which marks the job read.
	out.Reset()
	o.JSON = false
	if err := runJobsOutput(o); err != nil || out.String() != "out\n" || errOut.String() != "err\n" {
		t.Fatalf("jobs output: %v, stdout %q, stderr %q", err, out.String(), errOut.String())
	}
	out.Reset()
	if err := runJobsList(&jobsListOptions{f.options(false, &out, &errOut)}); err != nil || !strings.Contains(out.String(), "  yes   ci-bot  cli-test") {
		t.Fatalf("after reading its output the job's READ is not yes (%v):\n%s", err, out.String())
	}
}

func TestJobsStop(t *testing.T) {
	f := newJobsFixture(t)
	var out, errOut bytes.Buffer
	if err := runJobsStop(&jobsStopOptions{f.options(false, &out, &errOut), liveJob}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), liveJob+" ") {
		t.Fatalf("jobs stop: %q", out.String())
	}
	// The recorded supervisor got SIGTERM.
	if err := f.sleep.Wait(); err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Fatalf("the supervisor's end: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.dir(liveJob), jobmeta.StopFile)); err != nil {
		t.Fatalf("no stop request recorded: %v", err)
	}

	// A terminal job answers with its record and is left alone.
	out.Reset()
	if err := runJobsStop(&jobsStopOptions{f.options(true, &out, &errOut), doneJob}); err != nil {
		t.Fatal(err)
	}
	var rec jobmeta.Record
	if json.Unmarshal(out.Bytes(), &rec) != nil || rec.State != jobmeta.Exited {
		t.Fatalf("jobs stop --json of an exited job:\n%s", out.String())
	}
}

// TestJobsShortIDs: every jobs command takes a unique prefix of at least 8
// characters; an ambiguous one lists the candidates (the fixture's two
// jobs share 35 characters), and one that matches nothing says so.
func TestJobsShortIDs(t *testing.T) {
	f := newJobsFixture(t)
	var out, errOut bytes.Buffer
	other := "0f8fad5b-d9cb-469f-a165-70867728950e"
	f.job(t, other, "lettered", time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC))
	if err := runJobsShow(&jobsShowOptions{f.options(true, &out, &errOut), other[:8]}); err != nil {
		t.Fatal(err)
	}
	var rec jobmeta.Record
	if json.Unmarshal(out.Bytes(), &rec) != nil || rec.ProcessID != other {
		t.Fatalf("jobs show %s:\n%s", other[:8], out.String())
	}

	err := runJobsShow(&jobsShowOptions{f.options(false, &out, &errOut), "00000000-0000"})
	if err == nil || !strings.Contains(err.Error(), "ambiguous") || !strings.Contains(err.Error(), "\n  "+doneJob) ||
		!strings.Contains(err.Error(), "\n  "+liveJob) {
		t.Fatalf("an ambiguous prefix: %v", err)
	}
	for _, ref := range []string{"nope", other[:7], "ffffffff"} {
		if err := runJobsShow(&jobsShowOptions{f.options(false, &out, &errOut), ref}); err == nil ||
			!strings.Contains(err.Error(), "no job matches") {
			t.Errorf("jobs show %s: %v", ref, err)
		}
	}

	// The other commands resolve the same way.
	o := &jobsOutputOptions{jobsOptions: f.options(false, &out, &errOut), Ctx: context.Background(),
		Request: jobs.OutputRequest{ProcessID: "00000000-0000-4000"}}
	if err := runJobsOutput(o); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("jobs output of an ambiguous prefix: %v", err)
	}
	if err := runJobsStop(&jobsStopOptions{f.options(false, &out, &errOut), "00000000"}); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("jobs stop of an ambiguous prefix: %v", err)
	}
	in := &jobsInputOptions{jobsOptions: f.options(false, &out, &errOut), Ctx: context.Background(), ID: "nope-nope"}
	in.IO.In = strings.NewReader("")
	if err := runJobsInput(in); err == nil || !strings.Contains(err.Error(), "no job matches") {
		t.Fatalf("jobs input of an unknown prefix: %v", err)
	}
}

// TestJobsMissingStateDir: a mistyped --state-dir is an error naming it,
// and nothing is created, for every jobs command and activity.
func TestJobsMissingStateDir(t *testing.T) {
	parent := t.TempDir()
	missing := filepath.Join(parent, "nonexistent")
	for _, args := range [][]string{
		{"jobs", "list"}, {"jobs"}, {"jobs", "show", doneJob}, {"jobs", "output", doneJob}, {"jobs", "stop", doneJob},
		{"jobs", "wait", "--timeout", "0s", doneJob}, {"jobs", "reconcile", doneJob}, {"jobs", "input", doneJob},
		{"activity", "--last", "1"}, {"activity"},
	} {
		var out, errOut bytes.Buffer
		code := Main(append(args, "--state-dir", missing), IO{In: strings.NewReader(""), Out: &out, Err: &errOut})
		if code != ExitFailure || !strings.Contains(errOut.String(), "state directory "+missing+" does not exist") || out.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out.String(), errOut.String())
		}
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Fatalf("the commands created %d entries", len(entries))
	}
}
