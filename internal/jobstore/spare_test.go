package jobstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

const spareID = "5fa7e0b2-8c1d-4e3f-9a6b-0d2c4e6f8a1b"

// TestSpareIsInvisibleUntilAdmitted: a spare's directory is no job to
// list, count or resolve; admitted, it is the job, without the lock file.
func TestSpareIsInvisibleUntilAdmitted(t *testing.T) {
	f := newFixture(t)
	lock, err := f.st.PrepareSpare(spareID)
	if err != nil {
		t.Fatal(err)
	}
	if recs, err := f.st.List(); err != nil || len(recs) != 0 {
		t.Fatalf("with a spare: List = %d records, %v; want none", len(recs), err)
	}
	if sums, err := f.st.Summaries(); err != nil || len(sums) != 0 {
		t.Fatalf("with a spare: Summaries = %d, %v; want none", len(sums), err)
	}
	if _, err := f.st.Get(spareID); errcode.From(err).Code != errcode.NotFound {
		t.Fatalf("Get of a spare: %v, want not_found", err)
	}
	// A spare waits for its job far longer than a job directory may lack
	// its job.json before it is corrupt.
	f.now = f.now.Add(limits.SpareIdle)
	if recs, err := f.st.List(); err != nil || len(recs) != 0 {
		t.Fatalf("with a spare %v old: List = %d records, %v; want none", limits.SpareIdle, len(recs), err)
	}
	if _, err := f.st.Get(spareID); errcode.From(err).Code != errcode.NotFound {
		t.Fatalf("Get of a spare %v old: %v, want not_found", limits.SpareIdle, err)
	}
	if err := f.st.AdmitSpare(f.newJob(spareID), lock); err != nil {
		t.Fatal(err)
	}
	if r := f.get(spareID); r.ProcessID != spareID {
		t.Fatalf("the admitted spare reads as %+v", r)
	}
	if _, err := os.Lstat(filepath.Join(f.state, "launches", spareID+".spare")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the admitted job keeps the spare's lock file: %v", err)
	}
	// Dismissing a spare that became a job leaves the job.
	f.st.DismissSpare(spareID, lock)
	if got := f.dirs(); !reflect.DeepEqual(got, []string{spareID}) {
		t.Fatalf("after dismissing an admitted spare the store holds %v", got)
	}
}

// TestSpareNotAdmittedStaysASpare: a full job table refuses the job and
// leaves the spare as it was, invisible and locked.
func TestSpareNotAdmittedStaysASpare(t *testing.T) {
	f := newFixture(t)
	for i := range limits.MaxLiveJobs {
		id := id(i)
		f.running(id, f.now)
	}
	lock, err := f.st.PrepareSpare(spareID)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.st.AdmitSpare(f.newJob(spareID), lock); errcode.From(err).Code != errcode.JobTableFull {
		t.Fatalf("admitting into a full table: %v, want job_table_full", err)
	}
	if _, err := f.st.Get(spareID); errcode.From(err).Code != errcode.NotFound {
		t.Fatalf("a refused spare reads as a job: %v", err)
	}
	if err := f.st.SweepSpares(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f.st.Dir(spareID)); err != nil {
		t.Fatalf("a kept spare was swept: %v", err)
	}
	f.st.DismissSpare(spareID, lock)
	if _, err := os.Lstat(f.st.Dir(spareID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a dismissed spare's directory stays: %v", err)
	}
}

// TestSweepRemovesOnlyDeadSpares: a spare whose keeper let go of its lock
// (the keeping process died) is swept; a kept one, a job and a directory
// that is neither are not.
func TestSweepRemovesOnlyDeadSpares(t *testing.T) {
	f := newFixture(t)
	const kept, other = "6a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "7b2c3d4e-5f6a-4b7c-9d8e-0f1a2b3c4d5e"
	dead, err := f.st.PrepareSpare(spareID)
	if err != nil {
		t.Fatal(err)
	}
	dead.Close()
	// Another dead one after the directory that is neither, so that the
	// sweep is seen to go on past it.
	const lastDead = "8c3d4e5f-6a7b-4c8d-8e9f-1a2b3c4d5e6f"
	if dead, err = f.st.PrepareSpare(lastDead); err != nil {
		t.Fatal(err)
	}
	dead.Close()
	lock, err := f.st.PrepareSpare(kept)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	job := id(1)
	f.running(job, f.now)
	if err := os.Mkdir(f.st.Dir(other), 0o700); err != nil {
		t.Fatal(err)
	}
	// Only the kept spare is one a live process waits with.
	if n, err := f.st.Spares(); err != nil || n != 1 {
		t.Fatalf("Spares = %d, %v; want the kept one", n, err)
	}
	if err := f.st.SweepSpares(); err != nil {
		t.Fatal(err)
	}
	if n, err := f.st.Spares(); err != nil || n != 1 {
		t.Fatalf("after the sweep Spares = %d, %v; want the kept one", n, err)
	}
	if got, want := f.dirs(), sorted(kept, job, other); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the sweep the store holds %v, want %v", got, want)
	}
	if _, err := f.st.PrepareSpare("not-an-id"); err == nil {
		t.Fatal("a spare with an invalid ID was prepared")
	}
	if _, err := f.st.PrepareSpare(kept); err == nil {
		t.Fatal("a second spare in a kept spare's directory was prepared")
	}
}
