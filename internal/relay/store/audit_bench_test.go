package store

import "testing"

// BenchmarkAppendAudit is the writer's cost for a batch of one entry (the
// common case: calls arrive one at a time), pruning included.
func BenchmarkAppendAudit(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := []AuditEntry{auditCall(t0, "process.jobs")}
	b.ResetTimer()
	for range b.N {
		if err := s.AppendAudit(e, t0); err != nil {
			b.Fatal(err)
		}
	}
}
