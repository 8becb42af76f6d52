package agent

import (
	"context"
	"fmt"
	"io"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/isolation"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/mcpwire"
	"github.com/commandcore/commandcore/internal/tools"
)

// LocalConfig is what ServeLocal needs: the agent's directories and job
// settings, as for Run, and the stream the local client speaks MCP on.
type LocalConfig struct {
	StateDir  string
	ConfigDir string
	Exe       string
	Installed bool
	In        io.Reader
	Out       io.Writer
}

// ServeLocal serves the tools to one local MCP client over In and Out
// until the client leaves or ctx ends. There are no remote grants, but
// the owner's ceiling applies; the failed units of ended jobs are
// released on the agent's tick, so a session without an agent leaves
// none loaded either.
func ServeLocal(ctx context.Context, cfg LocalConfig) error {
	svc, err := jobs.Open(cfg.StateDir, cfg.Exe, cfg.Installed)
	if err != nil {
		return err
	}
	defer svc.Close()
	svc.KeepSpares()
	srv, err := tools.NewServer(svc, cfg.StateDir, cfg.ConfigDir, authz.LocalGate(cfg.ConfigDir), isolation.Report{})
	if err != nil {
		return err
	}
	svc.HideOwnDirs(ctx, cfg.ConfigDir, authz.JobsCutOff(cfg.ConfigDir))
	ctx, cancel := context.WithCancel(ctx)
	released := make(chan struct{})
	go func() {
		defer close(released)
		svc.ReleaseUnits(ctx)
		loop(ctx, ReconcileEvery, func() { svc.ReleaseUnits(ctx) })
	}()
	err = srv.Run(ctx, &mcpwire.Stdio{In: cfg.In, Out: cfg.Out})
	interrupted := ctx.Err() != nil
	cancel()
	<-released
	if err != nil && !interrupted {
		return fmt.Errorf("serve mcp: %w", err)
	}
	return nil
}
