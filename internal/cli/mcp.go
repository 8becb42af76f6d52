package cli

import (
	"os"
	"os/signal"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/agent"
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
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	exe, err := ownExecutable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), unix.SIGINT, unix.SIGTERM)
	defer stop()
	return agent.ServeLocal(ctx, agent.LocalConfig{StateDir: dirs.State, ConfigDir: dirs.Config, Exe: exe,
		Installed: o.Installed || runningAsService(), In: os.Stdin, Out: os.Stdout})
}
