package jobstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobstore"
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
