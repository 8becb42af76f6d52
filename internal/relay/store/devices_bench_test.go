package store

import (
	"fmt"
	"testing"
	"time"
)

// benchDevices opens a store with n enrolled devices and returns their IDs.
func benchDevices(b *testing.B, n int) (*Store, []string) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ids := make([]string, 0, n)
	for i := range n {
		code, err := s.CreateEnrollCode("", time.Hour, t0)
		if err != nil {
			b.Fatal(err)
		}
		d, _, _, err := s.Enroll(code, fmt.Sprintf("d%d", i), t0)
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	return s, ids
}

// BenchmarkSetSeen: a relay's last-seen update of 10,000 linked devices,
// once a minute.
func BenchmarkSetSeen(b *testing.B) {
	s, ids := benchDevices(b, 10000)
	b.ResetTimer()
	for i := range b.N {
		if err := s.SetSeen(ids, t0.Add(time.Duration(i)*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLinkWatch: what a link watcher reads each second with 10,000
// devices enrolled: every standing, or the standing-change counter.
func BenchmarkLinkWatch(b *testing.B) {
	s, _ := benchDevices(b, 10000)
	b.Run("standings", func(b *testing.B) {
		for range b.N {
			if _, err := s.Standings(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("counter", func(b *testing.B) {
		for range b.N {
			if _, err := s.StandingChanges(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
