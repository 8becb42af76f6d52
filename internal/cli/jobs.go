package cli

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/humantime"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/principal"
)

// jobsOptions is what every jobs subcommand shares: where it writes, how
// it opens the job core, and --json.
type jobsOptions struct {
	IO   IO
	Jobs func() (*jobs.Service, error)
	JSON bool
}

// withJobs runs fn on a freshly opened job core and closes it after.
func (o *jobsOptions) withJobs(fn func(*jobs.Service) error) error {
	svc, err := o.Jobs()
	if err != nil {
		return err
	}
	defer svc.Close()
	return fn(svc)
}

type jobsListOptions struct{ jobsOptions }

type jobsShowOptions struct {
	jobsOptions
	ID string
}

type jobsStopOptions struct {
	jobsOptions
	ID string
}

func newJobsCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &jobsOptions{IO: streams, Jobs: func() (*jobs.Service, error) { return openJobs(g, streams) }}
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "The local job ledger: list, show, output, input, wait, stop",
		Args:  exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			return runJobsList(&jobsListOptions{*o})
		},
	}
	cmd.PersistentFlags().BoolVar(&o.JSON, "json", false, "print JSON")
	cmd.AddCommand(
		&cobra.Command{
			Use: "list", Short: "List jobs, newest first", Args: exactArgs(0),
			RunE: func(*cobra.Command, []string) error { return runJobsList(&jobsListOptions{*o}) },
		},
		&cobra.Command{
			Use: "show ID", Short: "Show one job's record", Args: exactArgs(1),
			RunE: func(_ *cobra.Command, args []string) error {
				return runJobsShow(&jobsShowOptions{jobsOptions: *o, ID: args[0]})
			},
		},
		newJobsOutputCmd(o),
		newJobsInputCmd(o),
		newJobsReconcileCmd(g, streams, &o.JSON),
		newJobsWaitCmd(g, streams, &o.JSON),
		&cobra.Command{
			Use: "stop ID", Short: "Stop a live job", Args: exactArgs(1),
			RunE: func(_ *cobra.Command, args []string) error {
				return runJobsStop(&jobsStopOptions{jobsOptions: *o, ID: args[0]})
			},
		},
	)
	return cmd
}

func runJobsList(o *jobsListOptions) error {
	return o.withJobs(func(svc *jobs.Service) error {
		recs, err := svc.List(principal.Local)
		if err != nil {
			return err
		}
		if !o.JSON {
			return printList(o.IO.Out, recs)
		}
		sums := make([]jobmeta.Summary, 0, len(recs))
		for _, r := range recs {
			sums = append(sums, r.Summary())
		}
		return writeJSONLines(o.IO.Out, sums...)
	})
}

func runJobsShow(o *jobsShowOptions) error {
	return o.withJobs(func(svc *jobs.Service) error {
		id, err := svc.ResolveID(o.ID)
		if err != nil {
			return err
		}
		rec, err := svc.Status(principal.Local, id)
		if err != nil {
			return err
		}
		if o.JSON {
			return writeJSON(o.IO.Out, rec)
		}
		return printRecord(o.IO.Out, rec, time.Now())
	})
}

func runJobsStop(o *jobsStopOptions) error {
	return o.withJobs(func(svc *jobs.Service) error {
		id, err := svc.ResolveID(o.ID)
		if err != nil {
			return err
		}
		rec, err := svc.Stop(principal.Local, id)
		if err != nil {
			return err
		}
		if o.JSON {
			return writeJSON(o.IO.Out, rec)
		}
		_, err = fmt.Fprintf(o.IO.Out, "%s %s\n", rec.ProcessID, rec.State)
		return err
	})
}

// exitText is a record's end in one word: its exit code, its signal, or
// "-" while it has neither.
func exitText(r *jobmeta.Record) string {
	switch {
	case r.ExitCode != nil:
		return fmt.Sprint(*r.ExitCode)
	case r.Signal != "":
		return r.Signal
	}
	return "-"
}

// readText is the READ column: whether the job's output was read to its
// end (only a terminal job's can be).
func readText(r *jobmeta.Record) string {
	if r.Read {
		return "yes"
	}
	return "no"
}

// ownerText names the principal that started the job; a job from before
// jobs had owners has none.
func ownerText(r *jobmeta.Record) string {
	if r.Owner == "" {
		return "-"
	}
	return r.Owner
}

// durationText is how long the job has run: to its end, or until now
// while it runs; "-" before it started.
func durationText(r *jobmeta.Record, now time.Time) string {
	switch {
	case r.StartedAt == nil:
		return "-"
	case r.CompletedAt != nil:
		return humantime.Duration(r.CompletedAt.Sub(*r.StartedAt))
	case r.Terminal:
		return "-"
	}
	return humantime.Duration(now.Sub(*r.StartedAt)) + " so far"
}

func printList(w io.Writer, recs []*jobmeta.Record) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS ID\tSTATE\tEXIT\tCREATED\tREAD\tOWNER\tNAME")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ProcessID, r.State, exitText(r),
			humantime.Time(r.CreatedAt), readText(r), ownerText(r), r.Name)
	}
	return tw.Flush()
}

func printRecord(w io.Writer, r *jobmeta.Record, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	row("process id", r.ProcessID)
	if r.Name != "" {
		row("name", r.Name)
	}
	row("owner", ownerText(r))
	row("state", r.State)
	row("failure domain", r.FailureDomain)
	if r.Unit != "" {
		row("unit", r.Unit)
	}
	row("created", humantime.Time(r.CreatedAt))
	if r.StartedAt != nil {
		row("started", humantime.Time(*r.StartedAt))
	}
	if r.CompletedAt != nil {
		row("completed", humantime.Time(*r.CompletedAt))
	}
	row("duration", durationText(r, now))
	if r.ReconciledAt != nil {
		row("reconciled", humantime.Time(*r.ReconciledAt))
	}
	if r.ExitCode != nil {
		row("exit code", *r.ExitCode)
	}
	if r.Signal != "" {
		row("signal", r.Signal)
	}
	if r.Error != "" {
		row("error", r.Error)
	}
	row("read", readText(r))
	if c := r.Capture; c != nil {
		row("stdout", describeStream(c.Stdout))
		row("stderr", describeStream(c.Stderr))
	}
	if id := r.Claim; id != nil {
		row("supervisor pid", id.Supervisor.PID)
		if id.Child != nil {
			row("shell pid", id.Child.PID)
		}
	}
	return tw.Flush()
}

func describeStream(s jobmeta.StreamCapture) string {
	if s.ObservedBytes == nil {
		return "unknown"
	}
	d := fmt.Sprintf("%d bytes", *s.ObservedBytes)
	if s.DroppedBytes != nil && *s.DroppedBytes > 0 {
		d += fmt.Sprintf(" (%d discarded from the middle)", *s.DroppedBytes)
	}
	if !s.Complete {
		d += ", capture incomplete"
	}
	return d
}

type jobsOutputOptions struct {
	jobsOptions
	Ctx context.Context
	// Request names the job, the offsets and the page size.
	Request jobs.OutputRequest
}

func newJobsOutputCmd(o *jobsOptions) *cobra.Command {
	var req jobs.OutputRequest
	cmd := &cobra.Command{
		Use:   "output ID",
		Short: "Print a job's retained output (stdout to stdout, stderr to stderr)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.ProcessID = args[0]
			return runJobsOutput(&jobsOutputOptions{jobsOptions: *o, Ctx: cmd.Context(), Request: req})
		},
	}
	cmd.Flags().Int64Var(&req.StdoutOffset, "stdout-offset", 0, "stdout offset to start at")
	cmd.Flags().Int64Var(&req.StderrOffset, "stderr-offset", 0, "stderr offset to start at")
	cmd.Flags().IntVar(&req.MaxBytes, "max-bytes", 0, "bytes per stream per page (with --json: one page)")
	return cmd
}

func runJobsOutput(o *jobsOutputOptions) error {
	return o.withJobs(func(svc *jobs.Service) error {
		id, err := svc.ResolveID(o.Request.ProcessID)
		if err != nil {
			return err
		}
		o.Request.ProcessID = id
		if !o.JSON {
			return dumpOutput(o, svc)
		}
		out, err := svc.Output(o.Ctx, principal.Local, o.Request)
		if err != nil {
			return err
		}
		return writeJSON(o.IO.Out, out)
	})
}

// dumpOutput pages through everything retained, writing raw bytes.
func dumpOutput(o *jobsOutputOptions, svc *jobs.Service) error {
	req := o.Request
	for {
		out, err := svc.Output(o.Ctx, principal.Local, req)
		if err != nil {
			return err
		}
		for _, s := range []struct {
			page jobs.StreamPage
			w    io.Writer
		}{{out.Stdout, o.IO.Out}, {out.Stderr, o.IO.Err}} {
			if s.page.Gap != nil {
				fmt.Fprintf(o.IO.Err, "\n[commandcore: %d bytes discarded]\n", s.page.Gap.To-s.page.Gap.From)
			}
			data := []byte(s.page.Data)
			if s.page.Encoding == "base64" {
				if data, err = base64.StdEncoding.DecodeString(s.page.Data); err != nil {
					return fmt.Errorf("decode page: %w", err)
				}
			}
			if _, err := s.w.Write(data); err != nil {
				return err
			}
		}
		progressed := out.Stdout.NextOffset != req.StdoutOffset || out.Stderr.NextOffset != req.StderrOffset
		if (out.Stdout.EOF && out.Stderr.EOF) || !progressed {
			return nil
		}
		req.StdoutOffset, req.StderrOffset = out.Stdout.NextOffset, out.Stderr.NextOffset
	}
}

func newJobsReconcileCmd(g *globalFlags, streams IO, asJSON *bool) *cobra.Command {
	var kill bool
	cmd := &cobra.Command{
		Use:   "reconcile ID",
		Short: "Show (and with --kill, end) processes a lost fallback job left behind",
		Args:  exactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return runJobsReconcile(g, streams, asJSON, kill, args[0])
		},
	}
	cmd.Flags().BoolVar(&kill, "kill", false, "send SIGKILL to each survivor after verifying its identity")
	return cmd
}

func runJobsReconcile(g *globalFlags, streams IO, asJSON *bool, kill bool, ref string) error {
	svc, err := openJobs(g, streams)
	if err != nil {
		return err
	}
	defer svc.Close()
	id, err := svc.ResolveID(ref)
	if err != nil {
		return err
	}
	rec, err := svc.Status(principal.Local, id)
	if err != nil {
		return err
	}
	survivors := rec.Survivors
	if kill {
		if survivors, err = svc.KillSurvivors(id); err != nil {
			return err
		}
	}
	if *asJSON {
		return writeJSON(streams.Out, map[string]any{"process_id": rec.ProcessID, "state": rec.State, "survivors": survivors, "killed": kill})
	}
	verb := "survives"
	if kill {
		verb = "killed"
	}
	for _, p := range survivors {
		fmt.Fprintf(streams.Out, "pid %d (start ticks %d) %s\n", p.PID, p.StartTicks, verb)
	}
	if len(survivors) == 0 {
		fmt.Fprintf(streams.Out, "%s (%s): no surviving processes\n", rec.ProcessID, rec.State)
	}
	return nil
}
