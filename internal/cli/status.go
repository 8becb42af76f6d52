package cli

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/statedir"
	"github.com/commandcore/commandcore/internal/status"
	"github.com/commandcore/commandcore/internal/statusreport"
)

// errNotRunning makes status exit 3 after printing its report.
var errNotRunning = errors.New("no agent is running")

type statusOptions struct {
	IO  IO
	Ctx context.Context
	// Dirs are the agent's resolved directories and unit name
	// (statedir.Resolve fills the default name).
	Dirs statedir.Dirs
	JSON bool
	// Now is when the human form measures ages from.
	Now func() time.Time
}

func newStatusCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &statusOptions{IO: streams, Now: time.Now}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether the agent runs, its last connection observation, jobs and policy",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dirs, err := g.dirs()
			if err != nil {
				return err
			}
			o.Ctx, o.Dirs = cmd.Context(), dirs
			return runStatus(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the report as JSON (fields only grow)")
	return cmd
}

// runStatus prints the report; it returns an exit-3 error, already
// reported, when no agent runs.
func runStatus(o *statusOptions) error {
	r := statusreport.Build(o.Ctx, o.Dirs.State, o.Dirs.Config, o.Dirs.Service, procid.Default())
	var err error
	if o.JSON {
		err = writeJSON(o.IO.Out, r)
	} else {
		err = status.WriteHuman(o.IO.Out, r, o.Now())
	}
	if err != nil {
		return err
	}
	if !r.Agent.Running {
		// The report already says so; the exit code tells scripts.
		return &exitError{code: ExitNotAlive, err: errNotRunning, quiet: true}
	}
	return nil
}
