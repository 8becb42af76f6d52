// Package benchkit is what the benchmark packages share: latency samples
// summarised the same way (so their tables compare), the binaries under
// measurement built the same way, and tool results decoded the same way.
package benchkit

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
	cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	return out, nil
}

// DecodeResult turns a successful tool call's result into out (when not
// nil); a protocol error or an isError result is an error.
func DecodeResult(tool string, res *mcp.CallToolResult, err error, out any) error {
	if err != nil {
		return fmt.Errorf("%s: %w", tool, err)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("%s failed: %s", tool, raw)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}
