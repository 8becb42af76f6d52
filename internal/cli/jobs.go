package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/principal"
)

func newJobsCmd(g *globalFlags, streams IO) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "The local job ledger: list, show, output, stop",
		Args:  exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			return jobsList(g, streams, asJSON)
		},
	}
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(
		&cobra.Command{
			Use: "list", Short: "List jobs, newest first", Args: exactArgs(0),
			RunE: func(*cobra.Command, []string) error { return jobsList(g, streams, asJSON) },
		},
		&cobra.Command{
			Use: "show ID", Short: "Show one job's record", Args: exactArgs(1),
			RunE: func(_ *cobra.Command, args []string) error {
				svc, err := openService(g, false)
				if err != nil {
					return err
				}
				defer svc.Close()
				rec, err := svc.Status(principal.Local, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(streams.Out, rec)
				}
				return printRecord(streams.Out, rec)
			},
		},
		newJobsOutputCmd(g, streams, &asJSON),
		newJobsReconcileCmd(g, streams, &asJSON),
		&cobra.Command{
			Use: "stop ID", Short: "Stop a live job", Args: exactArgs(1),
			RunE: func(_ *cobra.Command, args []string) error {
				svc, err := openService(g, false)
				if err != nil {
					return err
				}
				defer svc.Close()
				rec, err := svc.Stop(principal.Local, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(streams.Out, rec)
				}
				_, err = fmt.Fprintf(streams.Out, "%s %s\n", rec.ProcessID, rec.State)
				return err
			},
		},
	)
	return cmd
}

func jobsList(g *globalFlags, streams IO, asJSON bool) error {
	svc, err := openService(g, false)
	if err != nil {
		return err
	}
	defer svc.Close()
	recs, err := svc.List(principal.Local)
	if err != nil {
		return err
	}
	if asJSON {
		sums := make([]jobmeta.Summary, 0, len(recs))
		for _, r := range recs {
			sums = append(sums, r.Summary())
		}
		return writeJSON(streams.Out, sums)
	}
	return printList(streams.Out, recs)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printList(w io.Writer, recs []*jobmeta.Record) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS ID\tSTATE\tEXIT\tCREATED\tREAD\tOWNER\tNAME")
	for _, r := range recs {
		exit := "-"
		switch {
		case r.ExitCode != nil:
			exit = fmt.Sprint(*r.ExitCode)
		case r.Signal != "":
			exit = r.Signal
		}
		read := ""
		if r.Terminal && !r.Read {
			read = "unread"
		}
		owner := r.Owner
		if owner == "" {
			owner = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ProcessID, r.State, exit,
			r.CreatedAt.Local().Format(time.DateTime), read, owner, r.Name)
	}
	return tw.Flush()
}

func printRecord(w io.Writer, r *jobmeta.Record) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	row("process id", r.ProcessID)
	if r.Name != "" {
		row("name", r.Name)
	}
	if r.Owner != "" {
		row("owner", r.Owner)
	}
	row("state", r.State)
	row("failure domain", r.FailureDomain)
	if r.Unit != "" {
		row("unit", r.Unit)
	}
	row("created", r.CreatedAt.Local().Format(time.RFC3339))
	if r.StartedAt != nil {
		row("started", r.StartedAt.Local().Format(time.RFC3339))
	}
	if r.CompletedAt != nil {
		row("completed", r.CompletedAt.Local().Format(time.RFC3339))
	}
	if r.ReconciledAt != nil {
		row("reconciled", r.ReconciledAt.Local().Format(time.RFC3339))
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

func newJobsOutputCmd(g *globalFlags, streams IO, asJSON *bool) *cobra.Command {
	var req jobs.OutputRequest
	cmd := &cobra.Command{
		Use:   "output ID",
		Short: "Print a job's retained output (stdout to stdout, stderr to stderr)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			svc, err := openService(g, false)
			if err != nil {
				return err
			}
			defer svc.Close()
			req.ProcessID = args[0]
			if *asJSON {
				out, err := svc.Output(cmd.Context(), principal.Local, req)
				if err != nil {
					return err
				}
				return writeJSON(streams.Out, out)
			}
			return dumpOutput(cmd, svc, req, streams)
		},
	}
	cmd.Flags().Int64Var(&req.StdoutOffset, "stdout-offset", 0, "stdout offset to start at")
	cmd.Flags().Int64Var(&req.StderrOffset, "stderr-offset", 0, "stderr offset to start at")
	cmd.Flags().IntVar(&req.MaxBytes, "max-bytes", 0, "bytes per stream per page (with --json: one page)")
	return cmd
}

// dumpOutput pages through everything retained, writing raw bytes.
func dumpOutput(cmd *cobra.Command, svc *jobs.Service, req jobs.OutputRequest, streams IO) error {
	for {
		out, err := svc.Output(cmd.Context(), principal.Local, req)
		if err != nil {
			return err
		}
		for _, s := range []struct {
			page jobs.StreamPage
			w    io.Writer
		}{{out.Stdout, streams.Out}, {out.Stderr, streams.Err}} {
			if s.page.Gap != nil {
				fmt.Fprintf(streams.Err, "\n[commandcore: %d bytes discarded]\n", s.page.Gap.To-s.page.Gap.From)
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
			svc, err := openService(g, false)
			if err != nil {
				return err
			}
			defer svc.Close()
			rec, err := svc.Status(principal.Local, args[0])
			if err != nil {
				return err
			}
			survivors := rec.Survivors
			if kill {
				if survivors, err = svc.KillSurvivors(args[0]); err != nil {
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
		},
	}
	cmd.Flags().BoolVar(&kill, "kill", false, "send SIGKILL to each survivor after verifying its identity")
	return cmd
}
