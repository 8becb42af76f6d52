package jobstore_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/commandcore/commandcore/internal/capture"
	"github.com/commandcore/commandcore/internal/jobmeta"
)

// TestPlantedLinksAreNotFollowed: a job can write its own directory, so it
// can put links to another job's files in place of its own. The store
// reads none of them through the link: a live job whose capture is a link
// to another job's reports unknown counters, not the other's; a job whose
// claim or terminal record is a link is corrupt, not the other job; and a
// job directory that is itself a link is corrupt too.
func TestPlantedLinksAreNotFollowed(t *testing.T) {
	f := newFixture(t)
	// Job 1, someone else's, with 1000 bytes of output.
	f.running(id(1), f.base)
	other := f.st.Dir(id(1))
	w, err := capture.Create(filepath.Join(other, jobmeta.StdoutFile))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	link := func(jid, name string) {
		t.Helper()
		if err := os.Symlink(filepath.Join(other, name), filepath.Join(f.st.Dir(jid), name)); err != nil {
			t.Fatal(err)
		}
	}

	f.running(id(2), f.base)
	link(id(2), jobmeta.StdoutFile)
	r := f.get(id(2))
	if r.State != jobmeta.Running || r.Capture == nil {
		t.Fatalf("job with a linked capture: %+v", r)
	}
	if out := r.Capture.Stdout; out.ObservedBytes != nil || out.RetainedBytes != nil {
		t.Errorf("a linked capture's counters %+v, want unknown", out)
	}

	f.job(id(3), f.base)
	link(id(3), jobmeta.ClaimFile)
	f.exited(id(1))
	f.job(id(4), f.base)
	link(id(4), jobmeta.ResultFile)
	for _, jid := range []string{id(3), id(4)} {
		if r := f.get(jid); r.State != jobmeta.Corrupt {
			t.Errorf("job %s with a linked record is %s, want corrupt", jid, r.State)
		}
	}

	if err := os.Symlink(other, f.st.Dir(id(5))); err != nil {
		t.Fatal(err)
	}
	if r := f.get(id(5)); r.State != jobmeta.Corrupt || r.Name != "" {
		t.Errorf("a job directory that is a link: %+v, want corrupt", r)
	}
}
