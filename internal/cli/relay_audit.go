package cli

import (
	"fmt"
	"github.com/commandcore/commandcore/internal/humantime"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// auditDefaultLast is how many entries `relay audit` shows by default.
const auditDefaultLast = 20

type auditOptions struct {
	relayOptions
	Last int
	JSON bool
}

func newRelayAuditCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &auditOptions{relayOptions: newRelayOptions(g, streams)}
	cmd := &cobra.Command{
		Use:   "audit [--last N] [--json]",
		Short: "The newest client calls through the relay, and requests refused without a valid token per source and minute (never arguments or output)",
		Args:  exactArgs(0),
		RunE:  func(*cobra.Command, []string) error { return runAudit(o) },
	}
	cmd.Flags().IntVar(&o.Last, "last", auditDefaultLast, "show the newest N calls and the newest N refusal counts, oldest first")
	cmd.Flags().BoolVar(&o.JSON, "json", false, `one JSON object per line: the calls ("kind":"call"), then the refusal counts ("kind":"refusals")`)
	return cmd
}

func runAudit(o *auditOptions) error {
	if o.Last < 1 || o.Last > limits.AuditMaxEntries {
		return usageError("--last must be between 1 and %d", limits.AuditMaxEntries)
	}
	var entries []store.AuditEntry
	var refusals []store.RefusalCount
	err := o.withState(func(st store.State) (err error) {
		if entries, err = st.Audit(o.Last); err != nil {
			return err
		}
		refusals, err = st.RefusalCounts(min(o.Last, limits.AuditMaxRefusalRows))
		return err
	})
	if err != nil {
		return err
	}
	if o.JSON {
		return writeAuditJSON(o.IO.Out, entries, refusals)
	}
	if err := printAuditTable(o.IO.Out, entries); err != nil {
		return err
	}
	return printRefusalTable(o.IO.Out, refusals)
}

// The kinds of line `relay audit --json` prints, so a reader tells a call
// from a count of refused requests.
const (
	auditKindCall     = "call"
	auditKindRefusals = "refusals"
)

type auditCallLine struct {
	Kind string `json:"kind"`
	store.AuditEntry
}

type auditRefusalsLine struct {
	Kind string `json:"kind"`
	store.RefusalCount
}

func writeAuditJSON(w io.Writer, entries []store.AuditEntry, refusals []store.RefusalCount) error {
	lines := make([]any, 0, len(entries)+len(refusals))
	for _, e := range entries {
		lines = append(lines, auditCallLine{auditKindCall, e})
	}
	for _, r := range refusals {
		lines = append(lines, auditRefusalsLine{auditKindRefusals, r})
	}
	return writeJSONLines(w, lines...)
}

// printRefusalTable prints the refusal counts after the calls, when there
// are any: "-" is a source the relay did not know or counted with others.
func printRefusalTable(w io.Writer, refusals []store.RefusalCount) error {
	if len(refusals) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nRequests refused without a valid client token, per source and minute:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MINUTE\tSOURCE\tREFUSED")
	for _, r := range refusals {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", humantime.Time(r.Minute), dash(r.Source), r.Count)
	}
	return tw.Flush()
}

// printAuditTable prints entries for people: one row each, "-" for what
// the relay did not know.
func printAuditTable(w io.Writer, entries []store.AuditEntry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tPRINCIPAL\tTOKEN\tDEVICE\tTOOL\tOUTCOME\tCODE\tDURATION")
	for _, e := range entries {
		d := (time.Duration(e.DurationUS) * time.Microsecond).Round(time.Microsecond)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", humantime.Time(e.At), dash(e.Principal), dash(e.TokenID),
			dash(e.Device), e.Tool, e.Outcome, dash(e.Code), d)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
