package cli

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/status"
	"github.com/commandcore/commandcore/internal/statusreport"
)

// errNotRunning makes status exit 3 after printing its report.
var errNotRunning = errors.New("no agent is running")

func newStatusCmd(g *globalFlags, streams IO) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether the agent runs, its last connection observation, jobs and policy",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dirs, err := g.dirs()
			if err != nil {
				return err
			}
			r := statusreport.Build(cmd.Context(), dirs.State, dirs.Config, g.serviceName(), procid.Default())
			if asJSON {
				err = writeJSON(streams.Out, r)
			} else {
				err = status.WriteHuman(streams.Out, r, time.Now())
			}
			if err != nil {
				return err
			}
			if !r.Agent.Running {
				// The report already says so; the exit code tells scripts.
				return &exitError{code: ExitNotAlive, err: errNotRunning, quiet: true}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON (fields only grow)")
	return cmd
}
