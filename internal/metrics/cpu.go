package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/procfs"
)

// CPU usage is the busy share of all CPUs between two reads of /proc/stat.
// A fresh 100 ms sample on every call would cost 100 ms of latency, far
// above the ≤ 5 ms target of system.metrics, so the Source keeps the previous
// read and reports usage since then:
//
//   - The first call (or a call more than CPUUsageMaxWindow after the last
//     read, when "since the last call" would be a stale average) takes a
//     short sample of CPUSampleWindow between two reads.
//   - A later call reports usage over the window since the previous read and
//     makes the current read the next base.
//   - A call less than CPUUsageMinWindow after the previous read, when too
//     few clock ticks have passed for a meaningful ratio, repeats the last
//     computed usage (its window and end time say so) and keeps the base.
//
// Every usage carries window_seconds and measured_at, so a client always
// knows which interval the number describes.
const (
	// CPUSampleWindow is the short sample taken when no recent read exists.
	CPUSampleWindow = 100 * time.Millisecond
	// CPUUsageMinWindow is the shortest window a new usage is computed over.
	CPUUsageMinWindow = 100 * time.Millisecond
	// CPUUsageMaxWindow is the longest window reported; an older base is
	// replaced by a fresh short sample.
	CPUUsageMaxWindow = 60 * time.Second
)

// CPUUsage is the share of all CPUs' time over one window, in percent
// (0–100, whatever the CPU count).
type CPUUsage struct {
	// BusyPercent is everything but idle and iowait.
	BusyPercent   float64 `json:"busy_percent"`
	UserPercent   float64 `json:"user_percent"`   // user + nice (guest time included)
	SystemPercent float64 `json:"system_percent"` // system + irq + softirq
	IowaitPercent float64 `json:"iowait_percent"`
	StealPercent  float64 `json:"steal_percent"`
	// WindowSeconds is the length of the window the shares describe.
	WindowSeconds float64 `json:"window_seconds"`
	// MeasuredAt is the end of the window.
	MeasuredAt time.Time `json:"measured_at"`
}

type cpuSample struct {
	at   time.Time
	stat procfs.CPUStat
}

type cpuState struct {
	mu   sync.Mutex
	base *cpuSample
	last *CPUUsage
}

// cpuUsage returns usage given the current read cur (taken at now). It may
// block for one short sample; the lock is held meanwhile, so concurrent first
// callers wait and then reuse that sample.
func (s *Source) cpuUsage(ctx context.Context, cur cpuSample) (*CPUUsage, error) {
	c := &s.cpu
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base != nil && cur.at.Sub(c.base.at) < s.cpuMinWindow && c.last != nil {
		u := *c.last
		return &u, nil
	}
	if c.base == nil || cur.at.Sub(c.base.at) > s.cpuMaxWindow || cur.at.Before(c.base.at) {
		t := time.NewTimer(s.cpuSampleWindow)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		st, err := s.fs.Stat()
		if err != nil {
			return nil, err
		}
		first := cur
		c.base = &first
		cur = cpuSample{at: time.Now(), stat: st.CPUTotal}
	}
	u := usageBetween(*c.base, cur)
	c.base = &cur
	if u == nil {
		// No tick passed (or the counters went backwards, e.g. a CPU went
		// offline): keep the last usage, if any.
		if c.last == nil {
			return nil, nil
		}
		l := *c.last
		return &l, nil
	}
	c.last = u
	v := *u
	return &v, nil
}

// usageBetween computes the shares between two reads; nil when no time was
// accounted in between.
func usageBetween(a, b cpuSample) *CPUUsage {
	// Guest time is already part of user time, so it is not added again.
	total := func(s procfs.CPUStat) float64 {
		return s.User + s.Nice + s.System + s.Idle + s.Iowait + s.IRQ + s.SoftIRQ + s.Steal
	}
	dt := total(b.stat) - total(a.stat)
	if dt <= 0 {
		return nil
	}
	pct := func(v float64) float64 {
		p := v / dt * 100
		switch {
		case p < 0:
			return 0
		case p > 100:
			return 100
		}
		return round2(p)
	}
	idle := (b.stat.Idle - a.stat.Idle) + (b.stat.Iowait - a.stat.Iowait)
	return &CPUUsage{
		BusyPercent:   pct(dt - idle),
		UserPercent:   pct((b.stat.User + b.stat.Nice) - (a.stat.User + a.stat.Nice)),
		SystemPercent: pct((b.stat.System + b.stat.IRQ + b.stat.SoftIRQ) - (a.stat.System + a.stat.IRQ + a.stat.SoftIRQ)),
		IowaitPercent: pct(b.stat.Iowait - a.stat.Iowait),
		StealPercent:  pct(b.stat.Steal - a.stat.Steal),
		WindowSeconds: round3(b.at.Sub(a.at).Seconds()),
		MeasuredAt:    b.at.UTC(),
	}
}
