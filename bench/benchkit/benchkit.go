// Package benchkit is what the benchmark packages share: latency samples
// summarised the same way (so their tables compare) and the binaries under
// measurement built the same way (prebuilt, or with package testkit, which
// also decodes their tool results).
package benchkit

import (
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/commandcore/commandcore/internal/testkit"
)

// Stats summarises samples: median (mean of the two middle samples for an
// even count), p90 and p99 (nearest rank), min and max.
type Stats struct {
	N                       int
	P50, P90, P99, Min, Max time.Duration
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
	rank := func(p float64) time.Duration { return s[int(math.Ceil(p*float64(n)))-1] }
	return Stats{N: n, P50: p50, P90: rank(0.9), P99: rank(0.99), Min: s[0], Max: s[n-1]}
}

// MS is d in (fractional) milliseconds.
func MS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Build builds pkg into a fixed path under the temporary directory
// (overwritten each run: systemdtest.Main exits the process, so a fresh
// temporary directory could not be removed) unless the environment
// variable env names a prebuilt binary. name must differ between packages
// whose benchmarks may run at once.
func Build(env, name, pkg, ldflags string, extraEnv ...string) (string, error) {
	if bin := os.Getenv(env); bin != "" {
		return filepath.Abs(bin)
	}
	out := filepath.Join(os.TempDir(), "commandcore-bench", name)
	if err := testkit.Build(out, pkg, []string{"-ldflags", ldflags}, extraEnv...); err != nil {
		return "", err
	}
	return out, nil
}
