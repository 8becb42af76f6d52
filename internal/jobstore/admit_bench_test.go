package jobstore_test

import (
	"slices"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
)

// BenchmarkAdmitFullTable times Admit, the launch's share of the job
// store, into an empty store and into a full table (31 live jobs whose
// supervisor runs, 99 ended and read), interleaved admission by admission
// (which store goes first alternating) so outside load falls on both alike.
// Untimed between admissions, the admitted job ends and is read (its
// record, then the read mark) and, as after a launch's answer, what
// retention discarded is swept: in the empty store the job is forgotten,
// in the full table it stays and retention prunes the oldest read job, as
// for a user who keeps jobs (bench's BenchmarkStartFullTable, in process).
// It reports each store's p50 and their ratio.
func BenchmarkAdmitFullTable(b *testing.B) {
	empty, full := newFixture(b), newFixture(b)
	for _, f := range []*fixture{empty, full} {
		f.st.IndexEvery = 0 // as shipped
	}
	for i := range 31 {
		full.running(id(1000+i), full.base.Add(-time.Duration(i)*time.Minute))
	}
	for i := range 99 {
		at := full.base.Add(-time.Duration(200-i) * time.Minute)
		full.terminal(id(2000+i), at, at, true)
	}
	code := 0
	admit := func(f *fixture, jid string, keep bool) time.Duration {
		t0 := time.Now()
		if err := f.st.Admit(f.newJob(jid)); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		f.write(jid, jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, ExitCode: &code, CompletedAt: f.now})
		if _, err := f.st.Get(jid); err != nil {
			b.Fatal(err)
		}
		if err := f.st.MarkRead(jid); err != nil {
			b.Fatal(err)
		}
		if !keep {
			if _, err := f.st.Forget(jid); err != nil {
				b.Fatal(err)
			}
		}
		f.st.Settle()
		return d
	}
	var es, fs []time.Duration
	b.ResetTimer()
	for i := range b.N {
		jid := id(10000 + i)
		if i%2 == 0 {
			es = append(es, admit(empty, jid, false))
			fs = append(fs, admit(full, jid, true))
		} else {
			fs = append(fs, admit(full, jid, true))
			es = append(es, admit(empty, jid, false))
		}
	}
	e, f := p50(es), p50(fs)
	b.ReportMetric(float64(e.Microseconds()), "empty-p50-µs")
	b.ReportMetric(float64(f.Microseconds()), "full-p50-µs")
	b.ReportMetric(float64(f)/float64(e), "full/empty-p50")
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
