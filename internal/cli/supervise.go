package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/hideexec"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/roles"
	"github.com/commandcore/commandcore/internal/supervisor"
)

func newSuperviseCmd(streams IO) *cobra.Command {
	return &cobra.Command{
		Use:    roles.Supervise + " JOB_DIR",
		Short:  "Per-job supervisor (started by the agent; never run by hand)",
		Hidden: true,
		Args:   exactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return supervisor.Run(args[0], streams.In, procid.Default())
		},
	}
}

// Supervise runs the supervisor without building the command tree: it is
// started once per job and has a memory budget, so it touches as little
// of the binary as it can. It returns the exit code.
func Supervise(jobDir string, stdin io.Reader, stderr io.Writer) int {
	if err := supervisor.Run(jobDir, stdin, procid.Default()); err != nil {
		fmt.Fprintf(stderr, "commandcore supervise: %v\n", err)
		return ExitFailure
	}
	return ExitOK
}

func newHideExecCmd(streams IO) *cobra.Command {
	return &cobra.Command{
		Use:   roles.HideExec + " STATE CONFIG BIND PATH ARG0 [ARG...]",
		Short: "Start a program with the agent's directories hidden (started by the agent; never run by hand)",
		// The program's own arguments follow, flags among them.
		DisableFlagParsing: true,
		Hidden:             true,
		RunE: func(_ *cobra.Command, args []string) error {
			// Main returns only when it could not exec; it has said why.
			return &exitError{code: hideexec.Main(args, streams.Err), err: errors.New(roles.HideExec + " failed"), quiet: true}
		},
	}
}

// HideExec runs the hide-exec role without building the command tree: it
// is started once per process.run command, whose latency it adds to. It
// returns only on failure, with the exit code.
func HideExec(args []string, stderr io.Writer) int { return hideexec.Main(args, stderr) }
