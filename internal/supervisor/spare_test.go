package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/envelope"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/procid"
)

// TestDismissedSpareLeavesNothing: a supervisor started in a directory
// without job.json is a spare; given no envelope, it exits cleanly having
// written nothing.
func TestDismissedSpareLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := Run(dir, strings.NewReader(""), procid.Default()); err != nil {
		t.Fatalf("a dismissed spare: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a dismissed spare left %d files", len(entries))
	}
}

// TestSpareRunsTheJobHandedToIt: a spare waits for its envelope; its job,
// admitted meanwhile, runs, and the job's start is the hand-over, not the
// spare's own start.
func TestSpareRunsTheJobHandedToIt(t *testing.T) {
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- Run(dir, r, procid.Default())
		r.Close()
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := os.Lstat(filepath.Join(dir, jobmeta.ClaimFile)); err == nil {
		t.Fatal("a spare claimed before its job arrived")
	}
	handedOver := time.Now().UTC()
	job := &jobmeta.Job{Schema: jobmeta.SchemaVersion, ID: "5fa7e0b2-8c1d-4e3f-9a6b-0d2c4e6f8a1b",
		FailureDomain: jobmeta.DomainSharedParentCgroup, CreatedAt: handedOver}
	if err := atomicfile.WriteJSON(filepath.Join(dir, jobmeta.JobFile), job); err != nil {
		t.Fatal(err)
	}
	if err := envelope.Encode(w, &envelope.Envelope{Version: envelope.Version, Command: "exit 7", Shell: "/bin/sh", Cwd: "/"}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the spare did not finish its job")
	}
	res, err := jobmeta.Read[jobmeta.Result](filepath.Join(dir, jobmeta.ResultFile))
	if err != nil || res.ExitCode == nil || *res.ExitCode != 7 {
		t.Fatalf("result %+v, %v; want exit 7", res, err)
	}
	claim, err := jobmeta.Read[jobmeta.Claim](filepath.Join(dir, jobmeta.ClaimFile))
	if err != nil || claim.StartedAt == nil || claim.ClaimedAt.Before(handedOver) || claim.StartedAt.Before(handedOver) {
		t.Fatalf("claim %+v, %v; want it claimed and started after the hand-over at %v", claim, err, handedOver)
	}
}

// TestJobMetadataUnreadable: a job.json that is there but unreadable is
// no spare's: the supervisor refuses to run.
func TestJobMetadataUnreadable(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, jobmeta.JobFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Run(dir, strings.NewReader(""), procid.Default()); err == nil || !strings.Contains(err.Error(), "read job metadata") {
		t.Fatalf("Run with a corrupt job.json: %v", err)
	}
}
