package cli

import (
	"context"
	"os/signal"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"fmt"
	"github.com/commandcore/commandcore/internal/statedir"
	"os"

	"github.com/commandcore/commandcore/internal/jobs"
)

// openJobs opens the job core over the jobs an agent left in its state
// directory (globalFlags.agentDirs), for the jobs commands: it creates
// nothing, and a missing state directory is an error naming it.
func openJobs(g *globalFlags, streams IO) (*jobs.Service, error) {
	dirs, err := g.agentDirs(streams)
	if err != nil {
		return nil, err
	}
	exe, err := ownExecutable()
	if err != nil {
		return nil, err
	}
	return jobs.OpenExisting(dirs.State, exe)
}

// ownExecutable is this binary, which each job's supervisor re-executes.
func ownExecutable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	return exe, nil
}

// runningAsService reports whether this process is a systemd service
// (systemd sets INVOCATION_ID for every unit it starts).
func runningAsService() bool { return os.Getenv("INVOCATION_ID") != "" }

// agentRole is what the agent and `commandcore mcp` start from: their
// directories, this binary (each job's supervisor), and fn's context,
// which ends on SIGINT or SIGTERM.
func agentRole(cmd *cobra.Command, g *globalFlags, fn func(ctx context.Context, dirs statedir.Dirs, exe string) error) error {
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
	return fn(ctx, dirs, exe)
}
