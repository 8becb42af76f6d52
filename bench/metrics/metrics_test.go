// Package metrics measures system.metrics (without the GPU probe) and
// process.list on this machine. Measurements, not assertions: the numbers
// are reported as custom benchmark metrics and nothing fails on a missed
// target (system.metrics: ≤ 5 ms).
//
//	go test ./bench/metrics -run '^$' -bench . -benchtime 2000x
//
// BenchmarkSystemMetrics warms the Source first (the first call takes the
// 100 ms CPU sample; later calls report usage since the previous read), then
// times back-to-back calls. BenchmarkSystemMetricsSpaced spaces the calls by
// CPUUsageMinWindow so every call computes a fresh usage window, as a
// client polling every few seconds would see.
package metrics

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/proclist"
)

// report adds median, p90, p99 and max latency in milliseconds.
func report(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		i := int(p * float64(len(lat)-1))
		return float64(lat[i].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.5), "median-ms")
	b.ReportMetric(q(0.9), "p90-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
}

// newSource returns a warmed Source and the first call's latency.
func newSource(b *testing.B) (*metrics.Source, time.Duration) {
	s, err := metrics.NewSource("/proc")
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	m, err := s.Metrics(context.Background(), metrics.MetricsRequest{})
	if err != nil {
		b.Fatal(err)
	}
	first := time.Since(start)
	if len(m.Errors) != 0 {
		b.Logf("sections unreadable here: %v", m.Errors)
	}
	return s, first
}

func BenchmarkSystemMetrics(b *testing.B) {
	s, first := newSource(b)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		if _, err := s.Metrics(ctx, metrics.MetricsRequest{}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	report(b, lat)
	b.ReportMetric(float64(first.Microseconds())/1000, "first-call-ms")
}

func BenchmarkSystemMetricsSpaced(b *testing.B) {
	s, first := newSource(b)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		time.Sleep(metrics.CPUUsageMinWindow)
		t0 := time.Now()
		m, err := s.Metrics(ctx, metrics.MetricsRequest{})
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		if m.CPU.Usage == nil || time.Since(m.CPU.Usage.MeasuredAt) > time.Second {
			b.Fatalf("no fresh usage: %+v", m.CPU.Usage)
		}
	}
	report(b, lat)
	b.ReportMetric(float64(first.Microseconds())/1000, "first-call-ms")
}

func BenchmarkProcessList(b *testing.B) {
	l, err := proclist.New("/proc", proclist.Agent{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var n int
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		r, err := l.List(ctx, proclist.Request{Limit: proclist.MaxLimit}, nil)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		n = r.TotalMatched
	}
	b.ReportMetric(float64(n), "processes")
	report(b, lat)
}
