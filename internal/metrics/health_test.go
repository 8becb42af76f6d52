package metrics

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestHealthFromFixture(t *testing.T) {
	s, err := NewSource("testdata/psi/proc")
	if err != nil {
		t.Fatal(err)
	}
	h := s.Health(t.TempDir())
	if h.MemoryAvailableBytes == nil || *h.MemoryAvailableBytes != 8192000*1024 || *h.MemoryTotalBytes != 16384000*1024 {
		t.Fatalf("memory: %v / %v", h.MemoryAvailableBytes, h.MemoryTotalBytes)
	}
	if got := h.PSI["memory"]; got.Some == nil || got.Some.Avg10 != 4 || got.Full == nil || got.Full.Avg300 != 0.1 {
		t.Fatalf("memory PSI: %+v", got)
	}
	if got := h.PSI["cpu"].Some; got == nil || got.Avg60 != 2.25 {
		t.Fatalf("cpu PSI: %+v", got)
	}
	if h.DiskFreeBytes == nil || *h.DiskFreeBytes == 0 || len(h.Errors) != 0 {
		t.Fatalf("disk %v errors %v", h.DiskFreeBytes, h.Errors)
	}
}

func TestHealthWithoutPSI(t *testing.T) {
	s, err := NewSource("testdata/nopsi/proc")
	if err != nil {
		t.Fatal(err)
	}
	h := s.Health("/nonexistent-path")
	if h.PSI != nil {
		t.Fatalf("PSI on a host without it: %+v", h.PSI)
	}
	if h.MemoryAvailableBytes == nil {
		t.Fatal("memory missing")
	}
	if h.DiskFreeBytes != nil || len(h.Errors) != 1 || h.Errors[0] != "disk" {
		t.Fatalf("an unreadable disk: free %v errors %v", h.DiskFreeBytes, h.Errors)
	}
}

func TestHealthOfThisHost(t *testing.T) {
	s, err := NewSource("/proc")
	if err != nil {
		t.Fatal(err)
	}
	h := s.Health("/")
	if h.MemoryAvailableBytes == nil || *h.MemoryAvailableBytes == 0 || h.DiskFreeBytes == nil {
		t.Fatalf("this host: %+v", h)
	}
}

// TestHealthVerdict: the launch snapshot is judged by system.metrics'
// thresholds, and summarised to its verdict only when healthy.
func TestHealthVerdict(t *testing.T) {
	s, err := NewSource("testdata/psi/proc")
	if err != nil {
		t.Fatal(err)
	}
	full := func(st *unix.Statfs_t) func(string, *unix.Statfs_t) error {
		return func(_ string, out *unix.Statfs_t) error { *out = *st; return nil }
	}
	// 50 % of memory available, PSI below every threshold, the disk 50 % used.
	s.statfs = full(&unix.Statfs_t{Bsize: 4096, Blocks: 1000, Bfree: 500, Bavail: 500})
	h := s.Health("/ignored")
	if h.Verdict != VerdictOK || len(h.Reasons) != 0 {
		t.Fatalf("healthy snapshot judged %s %+v", h.Verdict, h.Reasons)
	}
	if sum := h.Summary(); sum.Verdict != VerdictOK || sum.MemoryAvailableBytes != nil || sum.PSI != nil || sum.DiskFreeBytes != nil {
		t.Fatalf("a healthy summary keeps details: %+v", sum)
	}
	// 96 % used: critical, named by the store, never by its path.
	s.statfs = full(&unix.Statfs_t{Bsize: 4096, Blocks: 1000, Bfree: 40, Bavail: 40})
	h = s.Health("/secret/state/dir")
	if h.Verdict != VerdictCritical || len(h.Reasons) != 1 || h.Reasons[0].Code != ReasonDiskSpaceLow || h.Reasons[0].Subject != StoreDisk {
		t.Fatalf("a full disk judged %s %+v", h.Verdict, h.Reasons)
	}
	if sum := h.Summary(); sum.DiskFreeBytes == nil || sum.MemoryAvailableBytes == nil {
		t.Fatalf("an unhealthy summary drops details: %+v", sum)
	}
}
