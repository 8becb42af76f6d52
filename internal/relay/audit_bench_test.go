package relay

import (
	"context"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkAuditObserve measures what auditing adds to a call: building
// its entry and queueing it, with the writer committing behind. Entries
// beyond the queue are dropped and reported as dropped/op.
func BenchmarkAuditObserve(b *testing.B) {
	h := newHarness(b, nil)
	tok, _, err := h.st.CreateToken(store.TokenSpec{Name: "bench", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	at := time.Now()
	b.ResetTimer()
	for range b.N {
		h.srv.observe(at, time.Millisecond, tok, h.dev.ID, "", "process.jobs", "")
	}
	b.StopTimer()
	h.srv.audit.flush()
	b.ReportMetric(float64(h.srv.AuditDropped())/float64(b.N), "dropped/op")
}

// BenchmarkForwardSmallCall is one small forwarded call, audit included,
// for scale against BenchmarkAuditObserve.
func BenchmarkForwardSmallCall(b *testing.B) {
	h := newHarness(b, nil)
	_, bearer, err := h.st.CreateToken(store.TokenSpec{Name: "bench", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	h.link(b, auditDevice())
	s := h.session(b, "/mcp/dev", bearer)
	b.ResetTimer()
	for range b.N {
		if res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.jobs", Arguments: map[string]any{}}); err != nil || res.IsError {
			b.Fatalf("call: %v %+v", err, res)
		}
	}
	b.StopTimer()
	h.srv.audit.flush()
	b.ReportMetric(float64(h.srv.AuditDropped())/float64(b.N), "dropped/op")
}
