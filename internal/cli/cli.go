// Package cli is the commandcore command tree. Commands return errors; Main
// prints them once and maps them to exit codes.
package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/statedir"
)

// Exit codes (docs/architecture.md, Roles).
const (
	ExitOK       = 0
	ExitFailure  = 1
	ExitUsage    = 2
	ExitNotAlive = 3
)

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
	// quiet errors were already reported by the command's own output.
	quiet bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks an error in how the command was invoked.
func usageError(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// IO are the streams a command uses.
type IO struct {
	In       io.Reader
	Out, Err io.Writer
}

// Main runs the command line args and returns the exit code.
func Main(args []string, streams IO) int {
	root := NewRoot(streams)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if !ee.quiet {
			fmt.Fprintf(streams.Err, "commandcore: %v\n", err)
		}
		return ee.code
	}
	fmt.Fprintf(streams.Err, "commandcore: %v\n", err)
	if isUsage(err) {
		return ExitUsage
	}
	return ExitFailure
}

// isUsage recognises cobra's own argument and flag errors.
func isUsage(err error) bool {
	var fe *flagError
	// cobra reports an unknown subcommand as a plain error.
	return errors.As(err, &fe) || strings.HasPrefix(err.Error(), "unknown command ")
}

type flagError struct{ err error }

func (e *flagError) Error() string { return e.err.Error() }

// globalFlags are accepted by every stateful command.
type globalFlags struct {
	stateDir  string
	configDir string
	service   string
	// database is the relay commands' --database: a PostgreSQL URL in
	// place of the SQLite file in the state directory.
	database string
}

// serviceName is the agent's unit name these commands are about.
func (g *globalFlags) serviceName() string {
	if g.service == "" {
		return statedir.DefaultService
	}
	return g.service
}

// agentDirs resolves the directories of an agent to inspect: with an
// explicit --service, those its installed unit names (unless a directory
// flag says otherwise), so `jobs` and `activity` read what that agent
// writes; else as dirs does.
func (g *globalFlags) agentDirs(streams IO) (statedir.Dirs, error) {
	if g.service == "" {
		return g.dirs()
	}
	d, _, err := installedDirs(g, streams)
	return d, err
}

// dirs resolves the state and config directories.
func (g *globalFlags) dirs() (statedir.Dirs, error) {
	d, err := statedir.Resolve(statedir.Dirs{State: g.stateDir, Config: g.configDir, Service: g.service})
	if errors.Is(err, statedir.ErrInvalidService) {
		return d, usageError("--service: %v", err)
	}
	return d, err
}

// NewRoot returns the root command.
func NewRoot(streams IO) *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "commandcore",
		Short:         "Run and supervise durable shell jobs for AI agents",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &flagError{err} })
	root.PersistentFlags().StringVar(&g.stateDir, "state-dir", "", "state directory (default $XDG_STATE_HOME/commandcore)")
	root.PersistentFlags().StringVar(&g.configDir, "config-dir", "", "config directory (default $XDG_CONFIG_HOME/commandcore)")
	root.PersistentFlags().StringVar(&g.service, "service", statedir.DefaultService, "the agent's user unit name; a custom name keeps its own state and config directories")
	root.AddCommand(
		newVersionCmd(streams),
		newSuperviseCmd(streams),
		newHideExecCmd(streams),
		newMCPCmd(g),
		newJobsCmd(g, streams),
		newActivityCmd(g, streams),
		newAgentCmd(g, streams),
		newStatusCmd(g, streams),
		newInstallCmd(g, streams),
		newUninstallCmd(g, streams),
		newEnrollCmd(g, streams),
		newRelayCmd(g, streams),
		newUpdateCmd(g, streams),
		newUpdateWatchdogCmd(g),
	)
	return root
}

// exactArgs is cobra.ExactArgs reporting a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError("%s takes %d argument(s), got %d", cmd.CommandPath(), n, len(args))
		}
		return nil
	}
}
