package panel

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/relay/store"
)

// BenchmarkPages: each page's time to answer, signed in, over SQLite state
// holding 1,000 devices and a full audit log (100,000 entries): what an
// admin of a large relay waits for. Reports each page's p50 and p90.
func BenchmarkPages(b *testing.B) {
	f := newFixture(b, false)
	now := time.Now()
	for i := range 1000 {
		code, err := f.state.CreateEnrollCode("", time.Hour, now)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, _, err := f.state.Enroll(code, fmt.Sprintf("device-%04d", i), now); err != nil {
			b.Fatal(err)
		}
	}
	batch := make([]store.AuditEntry, 0, 1000)
	for i := range 100_000 {
		batch = append(batch, store.AuditEntry{At: now.Add(-time.Duration(100_000-i) * time.Second),
			Principal: fmt.Sprintf("p%d", i%20), Tool: "process.jobs", Outcome: store.AuditOK})
		if len(batch) == cap(batch) {
			if err := f.state.AppendAudit(batch, now); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	c := f.signIn("bench")
	pages := []string{"", "devices", "tokens", "enroll", "audit", "audit?principal=p7", "audit?principal=nobody"}
	samples := make([][]time.Duration, len(pages))
	b.ResetTimer()
	for range b.N {
		for i, path := range pages {
			began := time.Now()
			resp, _ := f.do(c, "GET", Prefix+path, nil, nil)
			samples[i] = append(samples[i], time.Since(began))
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("/panel/%s: %d", path, resp.StatusCode)
			}
		}
	}
	b.StopTimer()
	for i, path := range pages {
		s := samples[i]
		slices.Sort(s)
		name := path
		if name == "" {
			name = "overview"
		}
		b.ReportMetric(float64(s[len(s)/2].Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(s[len(s)*9/10].Microseconds())/1000, name+"-p90-ms")
	}
	b.ReportMetric(0, "ns/op")
}
