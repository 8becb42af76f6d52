package jobstore_test

import (
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
)

// BenchmarkAdmitFullTable times Admit, the launch's share of the job
// store, into an empty store and into a full table (31 live jobs whose
// supervisor runs, 99 ended and read), the admitted job ending and read
// before the next, untimed: in the empty store it is forgotten, in the
// full table it stays and retention prunes the oldest read job, as for a
// user who keeps jobs (bench's BenchmarkStartFullTable, in process).
func BenchmarkAdmitFullTable(b *testing.B) {
	for _, full := range []bool{false, true} {
		name := "empty"
		if full {
			name = "full"
		}
		b.Run(name, func(b *testing.B) {
			f := newFixture(b)
			f.st.IndexEvery = 0 // as shipped
			if full {
				for i := range 31 {
					f.running(id(1000+i), f.base.Add(-time.Duration(i)*time.Minute))
				}
				for i := range 99 {
					at := f.base.Add(-time.Duration(200-i) * time.Minute)
					f.terminal(id(2000+i), at, at, true)
				}
			}
			code := 0
			b.ResetTimer()
			for i := range b.N {
				jid := id(10000 + i)
				if err := f.st.Admit(f.newJob(jid)); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				f.write(jid, jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, ExitCode: &code, CompletedAt: f.now})
				// Read as process.output reads it: its record, then the mark.
				if _, err := f.st.Get(jid); err != nil {
					b.Fatal(err)
				}
				if err := f.st.MarkRead(jid); err != nil {
					b.Fatal(err)
				}
				if !full {
					if _, err := f.st.Forget(jid); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
		})
	}
}
