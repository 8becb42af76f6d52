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
	captured := jobmeta.Capture{Stdout: f.capture(t, doneJob, jobmeta.StdoutFile, "out\n"), Stderr: f.capture(t, doneJob, jobmeta.StderrFile, "err\n")}
	f.write(t, doneJob, jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, ExitCode: &code,
		CompletedAt: created.Add(time.Second), Capture: captured})

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
	if err := jobmeta.WriteAtomic(filepath.Join(f.dir(id), name), v); err != nil {
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
	return jobsOptions{IO: IO{Out: out, Err: errOut}, JSON: asJSON, Jobs: func() (*jobs.Service, error) { return openService(g, false) }}
}

func TestJobsList(t *testing.T) {
	f := newJobsFixture(t)
	var out, errOut bytes.Buffer
	if err := runJobsList(&jobsListOptions{f.options(false, &out, &errOut)}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "PROCESS ID") || !strings.HasPrefix(lines[1], liveJob+"  running") ||
		!strings.HasPrefix(lines[2], doneJob+"  exited") || !strings.Contains(lines[2], " 4 ") ||
		!strings.Contains(lines[2], "unread") || !strings.HasSuffix(lines[2], "cli-test") {
		t.Fatalf("jobs list:\n%s", out.String())
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
	for _, want := range []string{"process id:      " + doneJob, "name:            cli-test", "state:           exited",
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
	if err := runJobsList(&jobsListOptions{f.options(false, &out, &errOut)}); err != nil || strings.Contains(out.String(), "unread") {
		t.Fatalf("after reading its output the job is still unread (%v):\n%s", err, out.String())
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
