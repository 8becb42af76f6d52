package jobstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/procid"
)

// TestLiveJobsAreRememberedWhileTheirSupervisorRuns: once admission has
// derived a job live whose supervisor the launcher recorded, later
// admissions take its owner and key from memory for as long as that
// supervisor runs, whatever is on disk; once it is gone, or its launch
// record changes through the store, the job is derived again.
func TestLiveJobsAreRememberedWhileTheirSupervisorRuns(t *testing.T) {
	f := newFixture(t)
	key := strings.Repeat("a", 64)
	alice := f.keyed(id(1), "tok_alice", key)
	sup := f.supervisedJob(alice)
	if err := f.st.Admit(f.newJob(id(2))); err != nil {
		t.Fatal(err)
	}
	// Remembered: a launch record made unreadable is not read again, and
	// the key still holds.
	launch := filepath.Join(f.state, "launches", id(1)+".json")
	saved, err := os.ReadFile(launch)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(launch, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	var k *jobstore.KeyTaken
	if err := f.st.Admit(f.keyed(id(3), "tok_alice", key)); !errors.As(err, &k) || k.ID != id(1) {
		t.Fatalf("the remembered job's key: Admit = %v, want taken by %s", err, id(1))
	}
	// Its supervisor ends: the job is derived again, from what is on disk.
	sup.Process.Kill()
	sup.Wait()
	if err := f.st.Admit(f.keyed(id(4), "tok_alice", key)); err != nil {
		t.Fatalf("after the supervisor ended, the corrupt job holds no key: %v", err)
	}
	if r := f.get(id(1)); r.State != jobmeta.Corrupt {
		t.Fatalf("the job derived again: %s, want corrupt", r.State)
	}
	if err := os.WriteFile(launch, saved, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestALaunchRecordChangedThroughTheStoreIsDerivedAgain: a job remembered
// live whose launch record then changes through the store (another
// supervisor recorded, gone; the launch given up on) is derived again, so
// the end its directory holds counts.
func TestALaunchRecordChangedThroughTheStoreIsDerivedAgain(t *testing.T) {
	gone := func(f *fixture) procid.Identity {
		return procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}
	}
	for name, change := range map[string]func(f *fixture) error{
		"another supervisor": func(f *fixture) error { return f.st.RecordSupervisor(id(1), gone(f)) },
		"given up":           func(f *fixture) error { return f.st.MarkLaunchFailed(id(1), jobmeta.LaunchErrUnit) },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.supervisedJob(f.newJob(id(1)))
			if err := f.st.Admit(f.newJob(id(2))); err != nil {
				t.Fatal(err)
			}
			code := 0
			f.write(id(1), jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, ExitCode: &code, CompletedAt: f.now})
			if err := change(f); err != nil {
				t.Fatal(err)
			}
			if err := f.st.Admit(f.newJob(id(3))); err != nil {
				t.Fatal(err)
			}
			if ids := indexedIDs(t, f); !slices.Contains(ids, id(1)) {
				t.Fatalf("index holds %v: the job was not derived again", ids)
			}
		})
	}
}

// TestRetentionDiscardsAfterTheLaunch: the job retention discards leaves
// the table with the launch (no directory under its ID, no listing), and
// its files and records go afterwards; Settle waits for that.
func TestRetentionDiscardsAfterTheLaunch(t *testing.T) {
	f := newFixture(t)
	for i := range limits.MaxRetainedTerminalJobs {
		at := f.base.Add(-time.Duration(i+1) * time.Minute)
		f.terminal(id(i), at, at, true)
	}
	oldest := id(limits.MaxRetainedTerminalJobs - 1)
	if err := f.st.Admit(f.newJob(id(1000))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f.st.Dir(oldest)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the discarded job's directory after the launch: %v", err)
	}
	if r, err := f.st.Get(oldest); err == nil {
		t.Fatalf("the discarded job is still listed: %+v", r)
	}
	// Its files wait aside until swept, off the launch's path.
	aside := filepath.Join(f.root, ".discarded-"+oldest)
	if _, err := os.Stat(aside); err != nil {
		t.Fatalf("the discarded job's files before the sweep: %v", err)
	}
	if _, err := os.Stat(f.launchFile(oldest)); err != nil {
		t.Fatalf("the discarded job's launch record before the sweep: %v", err)
	}
	f.st.Sweep()
	f.st.Settle()
	entries, _ := os.ReadDir(f.root)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".discarded-") {
			t.Errorf("after Settle, %s is left", e.Name())
		}
	}
	if _, err := os.Stat(f.launchFile(oldest)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the discarded job's launch record: %v", err)
	}
}

// TestOpenRemovesWhatADiscardLeft: a directory a process set aside and
// did not remove (it died) goes, with its records, when the store opens
// again; what is not a discarded job's is left alone.
func TestOpenRemovesWhatADiscardLeft(t *testing.T) {
	f := newFixture(t)
	aside := filepath.Join(f.root, ".discarded-"+id(1))
	if err := os.MkdirAll(filepath.Join(aside, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(aside, "sub", "stdout.cap"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.launchFile(id(1)), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(f.root, ".discarded-not-an-id")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := jobstore.Open(f.state, f.procs); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{aside, f.launchFile(id(1))} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Open: %v", p, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("Open removed %s, which is no discarded job's: %v", other, err)
	}
}
