package jobstore_test

import (
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
)

// TestAdmissionIndexDecidesAsAFullScan: whatever state the admission index
// is in (built by earlier launches, then left stale by jobs that ended,
// were read or forgotten behind its back, deleted, or corrupted, as a
// SIGKILLed agent or another process leaves it), admission and retention
// decide exactly as a store without an index: the same error code and the
// same job directories left. A property test over random job sets.
func TestAdmissionIndexDecidesAsAFullScan(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 40; round++ {
		f := newFixture(t)
		n := 0
		next := func() string { n++; return id(n) }
		// A random table: live jobs, terminal jobs read or not, of any age
		// (some past the retention), corrupt ones.
		var terminals []string
		for i, k := 0, rng.Intn(40); i < k; i++ {
			f.running(next(), f.base.Add(-time.Duration(rng.Intn(100))*time.Minute))
		}
		for i, k := 0, 60+rng.Intn(60); i < k; i++ {
			age := time.Duration(rng.Intn(10*24)) * time.Hour
			j := next()
			f.terminal(j, f.base.Add(-age-time.Minute), f.base.Add(-age), rng.Intn(3) == 0)
			terminals = append(terminals, j)
		}
		if rng.Intn(2) == 0 {
			f.job(next(), f.base)
			os.WriteFile(filepath.Join(f.st.Dir(id(n)), jobmeta.ResultFile), []byte("{bad"), 0o600)
		}
		// Earlier launches built the index.
		f.st.Admit(f.newJob(next()))
		// Then it goes stale: reads, forgets and ends behind its back.
		for _, j := range terminals {
			if _, err := os.Stat(f.st.Dir(j)); err != nil {
				continue // pruned by that launch
			}
			switch rng.Intn(6) {
			case 0:
				f.write(j, jobmeta.ReadMarkFile, &jobmeta.ReadMark{Schema: jobmeta.SchemaVersion, ReadAt: f.now})
			case 1:
				os.RemoveAll(f.st.Dir(j))
			}
		}
		for i, k := 0, rng.Intn(5); i < k; i++ {
			f.terminal(next(), f.base, f.base, rng.Intn(2) == 0)
		}
		index := filepath.Join(f.root, ".index.json")
		switch rng.Intn(4) {
		case 0:
			os.Remove(index)
		case 1:
			os.WriteFile(index, []byte(`{"schema":1,"jobs":{"`+id(1)+`":{"state":"exited"`), 0o600)
		}
		f.now = f.base.Add(time.Duration(rng.Intn(48)) * time.Hour)

		// The same table without an index decides by a full scan.
		scan := newFixture(t)
		scan.now = f.now
		if out, err := exec.Command("cp", "-a", f.root+"/.", scan.root).CombinedOutput(); err != nil {
			t.Fatalf("copy the table: %v %s", err, out)
		}
		os.Remove(filepath.Join(scan.root, ".index.json"))

		newID := next()
		got, want := f.st.Admit(f.newJob(newID)), scan.st.Admit(scan.newJob(newID))
		if code(got) != code(want) {
			t.Fatalf("round %d: with the index %v, by a full scan %v", round, got, want)
		}
		sameDirs(t, "after admission", f.dirs(), scan.dirs())

		// Listings from the index say what a full derivation says.
		if rng.Intn(2) == 0 {
			for _, j := range terminals {
				if _, err := os.Stat(f.st.Dir(j)); err == nil && rng.Intn(4) == 0 {
					f.write(j, jobmeta.ReadMarkFile, &jobmeta.ReadMark{Schema: jobmeta.SchemaVersion, ReadAt: f.now})
				}
			}
		}
		sums, err := f.st.Summaries()
		if err != nil {
			t.Fatal(err)
		}
		recs, err := f.st.List()
		if err != nil {
			t.Fatal(err)
		}
		if len(sums) != len(recs) {
			t.Fatalf("round %d: %d summaries, %d records", round, len(sums), len(recs))
		}
		for i, r := range recs {
			if want := r.Summary(); !reflect.DeepEqual(sums[i], want) {
				t.Fatalf("round %d: summary %+v, derived %+v", round, sums[i], want)
			}
		}
	}
}

func code(err error) errcode.Code {
	if err == nil {
		return ""
	}
	return errcode.From(err).Code
}
