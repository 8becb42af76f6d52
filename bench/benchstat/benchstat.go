// Package benchstat summarises latency samples the same way for every
// benchmark package, so their tables compare.
package benchstat

import (
	"math"
	"sort"
	"time"
)

// Stats summarises samples: median (mean of the two middle samples for an
// even count), p90 (nearest rank), min and max.
type Stats struct {
	N                  int
	P50, P90, Min, Max time.Duration
}

// Summarize returns the Stats of samples; it does not reorder them.
func Summarize(samples []time.Duration) Stats {
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	n := len(s)
	if n == 0 {
		return Stats{}
	}
	p50 := s[n/2]
	if n%2 == 0 {
		p50 = (s[n/2-1] + s[n/2]) / 2
	}
	rank := int(math.Ceil(0.9*float64(n))) - 1
	return Stats{N: n, P50: p50, P90: s[rank], Min: s[0], Max: s[n-1]}
}

// MS is d in (fractional) milliseconds.
func MS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
