package jobstore_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
)

// TestClaimUnderItsEarlierNameIsRead: a job directory from a build that
// named the supervisor's claim identity.json is judged by that claim: its
// job runs, and ends as its result says; a claim under the earlier name
// that is not a claim is corrupt, as under the current one.
func TestClaimUnderItsEarlierNameIsRead(t *testing.T) {
	f := newFixture(t)
	f.running(id(1), f.base)
	legacy := func(jid string) {
		t.Helper()
		if err := os.Rename(filepath.Join(f.st.Dir(jid), jobmeta.ClaimFile), filepath.Join(f.st.Dir(jid), "identity.json")); err != nil {
			t.Fatal(err)
		}
	}
	legacy(id(1))
	f.now = f.base.Add(time.Minute) // past the wait for a claim
	if r := f.get(id(1)); r.State != jobmeta.Running {
		t.Fatalf("a job claimed under the earlier name: %s, want running", r.State)
	}
	f.running(id(2), f.base)
	legacy(id(2))
	os.WriteFile(filepath.Join(f.st.Dir(id(2)), "identity.json"), []byte("{not a claim"), 0o600)
	if r := f.get(id(2)); r.State != jobmeta.Corrupt {
		t.Fatalf("a broken claim under the earlier name: %s, want corrupt", r.State)
	}
}
