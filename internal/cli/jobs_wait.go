package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/humantime"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/principal"
)

type jobsWaitOptions struct {
	IO   IO
	JSON *bool
	// The flags and arguments as given.
	Any, All bool
	Timeout  time.Duration
	Refs     []string
}

func newJobsWaitCmd(g *globalFlags, streams IO, asJSON *bool) *cobra.Command {
	o := &jobsWaitOptions{IO: streams, JSON: asJSON}
	cmd := &cobra.Command{
		Use:   "wait ID...",
		Short: "Wait for any (--all: every) of the jobs to end",
		Long: fmt.Sprintf(`Wait until one of the jobs is terminal (--any, the default) or every one is
(--all), or until --timeout passes (at most %s). Prints each ended job's
state and exit code, and the jobs still live as pending; --json prints the
process.wait result (ended records, pending IDs).

Exits 0 when the condition was met, 1 when the timeout came first (or a job
does not exist).`, limits.WaitTimeoutMax),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError("%s takes at least one job ID", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Refs = args
			return runJobsWait(cmd.Context(), g, o)
		},
	}
	cmd.Flags().BoolVar(&o.Any, "any", false, "return when one of the jobs has ended (the default)")
	cmd.Flags().BoolVar(&o.All, "all", false, "return when every one of the jobs has ended")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", limits.WaitTimeoutDefault, "how long to wait at most")
	return cmd
}

func runJobsWait(ctx context.Context, g *globalFlags, o *jobsWaitOptions) error {
	if o.Any && o.All {
		return usageError("--any and --all exclude each other")
	}
	if o.Timeout < 0 || o.Timeout > limits.WaitTimeoutMax {
		return usageError("--timeout must be between 0 and %s", limits.WaitTimeoutMax)
	}
	svc, err := openJobs(g, o.IO)
	if err != nil {
		return err
	}
	defer svc.Close()
	req := jobs.WaitRequest{Mode: jobs.WaitAny}
	if o.All {
		req.Mode = jobs.WaitAll
	}
	ms := int(o.Timeout.Milliseconds())
	req.TimeoutMS = &ms
	for _, ref := range o.Refs {
		id, err := svc.ResolveID(ref)
		if err != nil {
			return err
		}
		req.ProcessIDs = append(req.ProcessIDs, id)
	}
	res, err := svc.Wait(ctx, principal.Local, req, nil)
	if err != nil {
		return err
	}
	if *o.JSON {
		err = writeJSON(o.IO.Out, res)
	} else {
		err = printWait(o.IO.Out, res)
	}
	if err != nil {
		return err
	}
	if res.Met != jobs.MetEnded {
		return &exitError{code: ExitFailure, err: fmt.Errorf("the wait timed out with %d of %d jobs still live", len(res.Pending), len(o.Refs))}
	}
	return nil
}

func printWait(w io.Writer, res *jobs.WaitResult) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS ID\tSTATE\tEXIT\tENDED")
	for _, r := range res.Ended {
		ended := "-"
		if r.CompletedAt != nil {
			ended = humantime.Time(*r.CompletedAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ProcessID, r.State, exitText(r), ended)
	}
	for _, id := range res.Pending {
		fmt.Fprintf(tw, "%s\tpending\t-\t-\n", id)
	}
	return tw.Flush()
}
