package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/agent"
	"github.com/commandcore/commandcore/internal/statedir"
)

func newAgentCmd(g *globalFlags, streams IO) *cobra.Command {
	var installed bool
	var server string
	every := agent.ReconcileEvery
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the agent (installed as a systemd user service)",
		Args:  exactArgs(0),
		RunE:  func(cmd *cobra.Command, _ []string) error { return runAgent(cmd, g, streams, server, installed, every) },
	}
	cmd.Flags().StringVar(&server, "server", "", "the server's URL, or its replicas' URLs separated by commas (default: those enrolled with)")
	cmd.Flags().BoolVar(&installed, "installed", false, "behave as an installed service: refuse jobs outside the systemd user manager")
	cmd.Flags().DurationVar(&every, "reconcile-every", agent.ReconcileEvery, "how often to look at every job")
	cmd.Flags().MarkHidden("reconcile-every")
	return cmd
}

func runAgent(cmd *cobra.Command, g *globalFlags, streams IO, server string, installed bool, every time.Duration) error {
	var servers []string
	if server != "" {
		var err error
		if servers, err = agent.ParseServers(server); err != nil {
			return usageError("--server: %v", err)
		}
	}
	if every <= 0 {
		return usageError("--reconcile-every must be positive")
	}
	return agentRole(cmd, g, func(ctx context.Context, dirs statedir.Dirs, exe string) error {
		return agent.Run(ctx, agent.Config{
			StateDir: dirs.State, ConfigDir: dirs.Config, Exe: exe,
			Installed: installed || runningAsService(), Servers: servers, ReconcileEvery: every, Log: streams.Err,
		})
	})
}
