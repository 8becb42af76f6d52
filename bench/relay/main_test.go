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
//	go test ./bench/relay -run '^$' -bench 'RelayCalls' -benchtime 1x -calls.duration 5m
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
// a prebuilt binary; otherwise TestMain builds one as `make build` does.
package relaybench

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/commandcore/commandcore/bench/benchkit"
	"github.com/commandcore/commandcore/internal/systemdtest"
)

// ccBin is the commandcore binary under measurement.
var ccBin string

func TestMain(m *testing.M) {
	// `go test ./...` visits this package too; only benchmark runs need
	// the binary and the user manager.
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	var err error
	if ccBin, err = benchkit.Build("COMMANDCORE_BIN", "relay-commandcore", "github.com/commandcore/commandcore/cmd/commandcore", ""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Holds the shared users lock (so no test elsewhere kills the manager
	// mid-measurement) and exports XDG_RUNTIME_DIR / DBUS_SESSION_BUS_ADDRESS
	// for the launched agent, `commandcore mcp` and their jobs.
	systemdtest.Main(m)
}

// summarize and ms are the shared benchkit ones.
var (
	summarize = benchkit.Summarize
	ms        = benchkit.MS
)

// report publishes one variant's latency samples as custom metrics named
// after it (e.g. "stdio-p50-ms").
func report(b *testing.B, name string, samples []time.Duration) benchkit.Stats {
	st := summarize(samples)
	b.ReportMetric(ms(st.P50), name+"-p50-ms")
	b.ReportMetric(ms(st.P90), name+"-p90-ms")
	b.ReportMetric(ms(st.Max), name+"-max-ms")
	return st
}
