// Package relaybench measures CommandCore's remote path: an MCP client
// reaching a device's tools through `commandcore relay serve` and the
// agent's WebSocket link, against the same tools over stdio
// (`commandcore mcp`). These are measurements, not assertions: every
// benchmark reports its numbers as custom metrics and nothing fails on a
// missed target.
//
//	go test ./bench/relay -run '^$' -bench . -benchtime 30x
//	go test ./bench/relay -run '^$' -bench 'ToolLatency' -benchtime 200x
//	go test ./bench/relay -run '^$' -bench 'RunThroughput' -benchtime 10x
//
// Each benchmark starts its own relay on a loopback port, enrolls a device,
// starts its agent, creates a client token and opens a go-sdk
// StreamableClientTransport session to /mcp/<device> with that bearer
// token; next to it runs one `commandcore mcp` over stdio. Every iteration
// makes one sample of each variant, in an order rotated per iteration, so
// that outside load falls on all variants alike.
//
// Like the e2e tests, the benchmarks use the shared systemd user manager
// (package systemdtest boots or reuses it). Set COMMANDCORE_BIN to benchmark
// a prebuilt binary; otherwise TestMain builds one (CGO_ENABLED=0).
package relaybench

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/commandcore/commandcore/bench/benchstat"
	"github.com/commandcore/commandcore/internal/systemdtest"
)

// ccBin is the commandcore binary under measurement.
var ccBin string

// build builds commandcore into a fixed path under the temporary directory
// (overwritten each run: systemdtest.Main exits the process, so a fresh
// temporary directory could not be removed) unless COMMANDCORE_BIN names a
// prebuilt one.
func build() (string, error) {
	if bin := os.Getenv("COMMANDCORE_BIN"); bin != "" {
		return filepath.Abs(bin)
	}
	out := filepath.Join(os.TempDir(), "commandcore-bench-relay", "commandcore")
	cmd := exec.Command("go", "build", "-o", out, "github.com/commandcore/commandcore/cmd/commandcore")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build commandcore: %w", err)
	}
	return out, nil
}

func TestMain(m *testing.M) {
	// `go test ./...` visits this package too; only benchmark runs need
	// the binary and the user manager.
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	var err error
	if ccBin, err = build(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Holds the shared users lock (so no test elsewhere kills the manager
	// mid-measurement) and exports XDG_RUNTIME_DIR / DBUS_SESSION_BUS_ADDRESS
	// for the launched agent, `commandcore mcp` and their jobs.
	systemdtest.Main(m)
}

// summarize and ms are the shared benchstat ones.
var (
	summarize = benchstat.Summarize
	ms        = benchstat.MS
)

// report publishes one variant's latency samples as custom metrics named
// after it (e.g. "stdio-p50-ms").
func report(b *testing.B, name string, samples []time.Duration) benchstat.Stats {
	st := summarize(samples)
	b.ReportMetric(ms(st.P50), name+"-p50-ms")
	b.ReportMetric(ms(st.P90), name+"-p90-ms")
	b.ReportMetric(ms(st.Max), name+"-max-ms")
	return st
}
