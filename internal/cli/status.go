package cli

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/install"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/statedir"
	"github.com/commandcore/commandcore/internal/statusreport"
)

// errNotRunning makes status exit 3 after printing its report.
var errNotRunning = errors.New("no agent is running")

type statusOptions struct {
	IO IO
	// Dirs are the agent's resolved directories and unit name
	// (statedir.Resolve fills the default name).
	Dirs statedir.Dirs
	// UnitFile is the agent's unit file; empty when it is not installed.
	UnitFile string
	JSON     bool
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
			dirs, unit, err := installedDirs(g, streams)
			if err != nil {
				return err
			}
			o.Dirs, o.UnitFile = dirs, unit
			return runStatus(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the report as JSON (fields only grow)")
	return cmd
}

// runStatus prints the report; it returns an exit-3 error, already
// reported, when no agent runs.
func runStatus(o *statusOptions) error {
	r := statusreport.Build(statusreport.Input{StateDir: o.Dirs.State, ConfigDir: o.Dirs.Config, Service: o.Dirs.Service, UnitFile: o.UnitFile}, procid.Default())
	var err error
	if o.JSON {
		err = writeJSON(o.IO.Out, r)
	} else {
		err = writeStatus(o.IO.Out, r, o.Now())
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

// installedDirs resolves the directories of the installation these flags
// name: a directory flag first, then what the service's unit file gives
// its agent, then the defaults. It also returns the unit file ("" when the
// service is not installed); a unit whose directories cannot be read back
// is reported on stderr and the defaults are used.
func installedDirs(g *globalFlags, streams IO) (statedir.Dirs, string, error) {
	name, err := install.ServiceName(g.serviceName())
	if err != nil {
		return statedir.Dirs{}, "", usageError("--service: %v", err)
	}
	want := statedir.Dirs{State: g.stateDir, Config: g.configDir, Service: name}
	unit, err := install.Find(name)
	switch {
	case errors.Is(err, install.ErrNotInstalled):
	case unit == nil:
		return statedir.Dirs{}, "", err
	case err != nil:
		fmt.Fprintf(streams.Err, "commandcore: warning: %v; using the default directories\n", err)
	default:
		want.State = cmp.Or(want.State, unit.StateDir)
		want.Config = cmp.Or(want.Config, unit.ConfigDir)
	}
	dirs, err := statedir.Resolve(want)
	path := ""
	if unit != nil {
		path = unit.Path
	}
	return dirs, path, err
}
