package jobstore_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobstore"
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

// TestEarlierBuildsJobIsAdopted: a job directory an earlier build wrote
// (job.json, no launch record) is listed and managed as it was: its
// job.json and claim are adopted the first time they are seen, into a
// launch record, and nothing the job writes into job.json afterwards
// counts. A directory that holds neither is no job, and neither is one
// whose job.json names another job.
func TestEarlierBuildsJobIsAdopted(t *testing.T) {
	f := newFixture(t)
	f.running(id(1), f.base)
	f.rewriteJobFile(id(1), func(j *jobmeta.Job) { j.Owner = "tok_alice" })
	if r := f.get(id(1)); r.Owner != "tok_alice" || r.State != jobmeta.Running {
		t.Fatalf("an earlier build's job: %+v", r)
	}
	rec, err := f.st.Launch(id(1))
	if err != nil || !rec.Adopted || rec.Supervisor == nil || *rec.Supervisor != f.self || rec.BootID != f.bootID {
		t.Fatalf("adopted launch record %+v, %v", rec, err)
	}
	f.rewriteJobFile(id(1), func(j *jobmeta.Job) { j.Owner = "tok_bob" })
	if r := f.get(id(1)); r.Owner != "tok_alice" {
		t.Fatalf("after adoption the job.json owner counts: %q", r.Owner)
	}
	// A terminal one without a claim ends as its files say.
	f.terminal(id(2), f.base, f.base, true)
	if r := f.get(id(2)); r.State != jobmeta.Exited {
		t.Fatalf("an earlier build's ended job: %s", r.State)
	}
	// job.json of another job is corrupt.
	f.job(id(4), f.base)
	f.rewriteJobFile(id(4), func(j *jobmeta.Job) { j.ID = id(5) })
	if r := f.get(id(4)); r.State != jobmeta.Corrupt {
		t.Fatalf("job.json of another job: %s, want corrupt", r.State)
	}
	// Another store on the same directory reads the same record.
	other := jobstore.OpenExisting(f.state, f.procs)
	if r, err := other.Get(id(1)); err != nil || r.Owner != "tok_alice" {
		t.Fatalf("another store's look: %+v, %v", r, err)
	}
	// A launch record of another job is corrupt.
	data, _ := os.ReadFile(f.launchFile(id(1)))
	os.WriteFile(f.launchFile(id(6)), data, 0o600)
	if err := os.Mkdir(f.st.Dir(id(6)), 0o700); err != nil {
		t.Fatal(err)
	}
	if r := f.get(id(6)); r.State != jobmeta.Corrupt {
		t.Fatalf("a launch record of another job: %s, want corrupt", r.State)
	}
}
