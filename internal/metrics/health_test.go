package metrics

import (
	"testing"
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
