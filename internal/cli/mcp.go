package cli

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/agent"
	"github.com/commandcore/commandcore/internal/statedir"
)

type mcpOptions struct {
	Installed bool
}

func newMCPCmd(g *globalFlags) *cobra.Command {
	o := &mcpOptions{}
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the tools over MCP stdio for a client on this machine",
		Args:  exactArgs(0),
		RunE:  func(cmd *cobra.Command, _ []string) error { return runMCP(cmd, g, o) },
	}
	cmd.Flags().BoolVar(&o.Installed, "installed", false, "behave as an installed service: refuse jobs outside the systemd user manager")
	return cmd
}

func runMCP(cmd *cobra.Command, g *globalFlags, o *mcpOptions) error {
	return agentRole(cmd, g, func(ctx context.Context, dirs statedir.Dirs, exe string) error {
		return agent.ServeLocal(ctx, agent.LocalConfig{StateDir: dirs.State, ConfigDir: dirs.Config, Exe: exe,
			Installed: o.Installed || runningAsService(), In: os.Stdin, Out: os.Stdout})
	})
}
