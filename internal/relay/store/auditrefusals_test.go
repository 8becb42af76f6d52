package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// TestRefusalCountsAddUp: counts of one source and minute add up into one
// row, whichever Store (process) adds them; they read back oldest first.
func TestRefusalCountsAddUp(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		dir := newPlace(t)
		a, b := openT(t, dir), openT(t, dir)
		m := t0.Truncate(time.Minute)
		for _, s := range []*Store{a, b, a} {
			if err := s.AddRefusalCounts([]RefusalCount{{Minute: m, Source: "192.0.2.7", Count: 1000}, {Minute: m.Add(time.Minute), Source: "2001:db8::/64", Count: 1}}, t0); err != nil {
				t.Fatal(err)
			}
		}
		got, err := b.RefusalCounts(10)
		if err != nil {
			t.Fatal(err)
		}
		want := []RefusalCount{{Minute: m, Source: "192.0.2.7", Count: 3000}, {Minute: m.Add(time.Minute), Source: "2001:db8::/64", Count: 3}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("counts %v, want %v", got, want)
		}
		if got, err := b.RefusalCounts(1); err != nil || len(got) != 1 || got[0].Source != "2001:db8::/64" {
			t.Fatalf("the newest count: %v %v", got, err)
		}
		for _, n := range []int{0, limits.AuditMaxRefusalRows + 1} {
			_, err := a.RefusalCounts(n)
			wantCode(t, err, errcode.InvalidArgument)
		}
	})
}

// TestRefusalCountsRefuseContent: only a whole minute, a positive count
// and a canonical address or prefix are stored.
func TestRefusalCountsRefuseContent(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		m := t0.Truncate(time.Minute)
		for _, bad := range []RefusalCount{
			{Minute: m.Add(time.Second), Source: "192.0.2.7", Count: 1},
			{Minute: m, Source: "192.0.2.7", Count: 0},
			{Minute: m, Source: "192.0.2.7:443", Count: 1},
			{Minute: m, Source: "cct_secret", Count: 1},
			{Minute: m, Source: "2001:DB8::/64", Count: 1},
			{Minute: m, Source: "2001:db8::1/64", Count: 1},
			{Minute: m, Source: "fe80::1%eth0", Count: 1},
		} {
			err := s.AddRefusalCounts([]RefusalCount{{Minute: m, Source: "", Count: 1}, bad}, t0)
			wantCode(t, err, errcode.InvalidArgument)
		}
		if got, err := s.RefusalCounts(10); err != nil || len(got) != 0 {
			t.Fatalf("a refused batch wrote %v %v", got, err)
		}
	})
}

// TestRefusalCountsNeverEvictEntries: with both bounds small (the seam),
// many more refusal counts than either bound keep the newest counts and
// leave every audit entry in place; the age bound applies to the counts.
func TestRefusalCountsNeverEvictEntries(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		s.audit.entries, s.audit.refusalRows = 5, 3
		for i := range 5 {
			if err := s.AppendAudit([]AuditEntry{auditCall(t0.Add(time.Duration(i)*time.Second), "process.jobs")}, t0); err != nil {
				t.Fatal(err)
			}
		}
		m := t0.Truncate(time.Minute)
		for i := range 50 {
			c := RefusalCount{Minute: m.Add(time.Duration(i/10) * time.Minute), Source: fmt.Sprintf("198.51.100.%d", i%10), Count: 7}
			if err := s.AddRefusalCounts([]RefusalCount{c}, t0); err != nil {
				t.Fatal(err)
			}
		}
		if n := auditCount(t, s); n != 5 {
			t.Fatalf("the refusals left %d of 5 entries", n)
		}
		got, err := s.RefusalCounts(100)
		if err != nil || len(got) != 3 || got[2].Source != "198.51.100.9" || !got[2].Minute.Equal(m.Add(4*time.Minute)) {
			t.Fatalf("kept counts %v %v", got, err)
		}
		if err := s.AddRefusalCounts(nil, t0.Add(limits.AuditMaxAge+5*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if got, err := s.RefusalCounts(100); err != nil || len(got) != 0 {
			t.Fatalf("counts older than the age bound survived: %v %v", got, err)
		}
		if n := auditCount(t, s); n != 5 {
			t.Fatalf("pruning the counts left %d of 5 entries", n)
		}
	})
}
