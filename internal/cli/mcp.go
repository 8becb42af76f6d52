package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/agent"
	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/mcpwire"
	"github.com/commandcore/commandcore/internal/tools"
	"github.com/commandcore/commandcore/internal/toolspec"
	"github.com/commandcore/commandcore/internal/version"
)

func newMCPCmd(g *globalFlags) *cobra.Command {
	var installed bool
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the tools over MCP stdio for a client on this machine",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			svc, err := openService(g, installed || runningAsService())
			if err != nil {
				return err
			}
			defer svc.Close()
			srv := mcp.NewServer(&mcp.Implementation{Name: "commandcore", Version: version.Version}, &mcp.ServerOptions{Instructions: toolspec.Instructions})
			dirs, err := g.dirs()
			if err != nil {
				return err
			}
			host, err := tools.NewHost("/proc", svc, dirs.State, dirs.Config)
			if err != nil {
				return err
			}
			svc.HideOwnDirs(cmd.Context(), dirs.Config, authz.JobsCutOff(dirs.Config))
			// No remote grants here, but the owner's ceiling still applies.
			tools.Register(srv, svc, host, authz.LocalGate(dirs.Config))
			ctx, stop := signal.NotifyContext(cmd.Context(), unix.SIGINT, unix.SIGTERM)
			defer stop()
			released := releaseUnits(ctx, svc)
			err = srv.Run(ctx, &mcpwire.Stdio{In: os.Stdin, Out: os.Stdout})
			interrupted := ctx.Err() != nil
			stop()
			<-released
			if err != nil && !interrupted {
				return fmt.Errorf("serve mcp: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&installed, "installed", false, "behave as an installed service: refuse jobs outside the systemd user manager")
	return cmd
}

// releaseUnits resets, at once and every agent.ReconcileEvery until ctx
// ends, the failed units of jobs whose end is on record, as the agent's
// tick does: a `commandcore mcp` session without an agent leaves none of
// its jobs' units loaded either. The returned channel closes once it
// stopped.
func releaseUnits(ctx context.Context, svc *jobs.Service) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(agent.ReconcileEvery)
		defer t.Stop()
		for {
			svc.ReleaseUnits(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return done
}
