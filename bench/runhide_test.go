package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/hideexec"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/run"
)

// BenchmarkRunTrue times process.run's core (run.Run in process, no MCP)
// of `true`, from the call to its result: with the shell started directly,
// as before the hide-exec role (direct), and through the role (hidden),
// which adds a start of the commandcore binary and its mounts.
func BenchmarkRunTrue(b *testing.B) {
	state, config := b.TempDir(), b.TempDir()
	h := hideexec.Probe(context.Background(), ccBin, state, config)
	if h == nil {
		b.Fatal("the hide-exec probe failed")
	}
	for _, v := range []struct {
		name string
		hide *hideexec.Hider
	}{{"direct", nil}, {"hidden", h}} {
		b.Run(v.name, func(b *testing.B) {
			measure(b, sampler{name: v.name, run: func() (time.Duration, error) {
				began := time.Now()
				res, err := run.Run(context.Background(), run.Request{Command: "true", Cwd: "/"},
					run.Options{Shell: jobs.DefaultShell(), Hide: v.hide})
				d := time.Since(began)
				if err == nil && (res.ExitCode == nil || *res.ExitCode != 0) {
					err = fmt.Errorf("true exited %v", res.ExitCode)
				}
				return d, err
			}})
		})
	}
}
