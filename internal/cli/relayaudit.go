package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relaystate"
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
		Short: "The newest client calls through the relay (content-free: never arguments or output)",
		Args:  exactArgs(0),
		RunE:  func(*cobra.Command, []string) error { return runAudit(o) },
	}
	cmd.Flags().IntVar(&o.Last, "last", auditDefaultLast, "show the newest N entries, oldest first")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "one JSON object per line")
	return cmd
}

func runAudit(o *auditOptions) error {
	if o.Last < 1 || o.Last > limits.AuditMaxEntries {
		return usageError("--last must be between 1 and %d", limits.AuditMaxEntries)
	}
	var entries []relaystate.AuditEntry
	err := o.withState(func(st relaystate.State) (err error) {
		entries, err = st.Audit(o.Last)
		return err
	})
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSONLines(o.IO.Out, entries...)
	}
	return printAuditTable(o.IO.Out, entries)
}

// printAuditTable prints entries for people: one row each, "-" for what
// the relay did not know.
func printAuditTable(w io.Writer, entries []relaystate.AuditEntry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tPRINCIPAL\tTOKEN\tDEVICE\tTOOL\tOUTCOME\tCODE\tDURATION")
	for _, e := range entries {
		d := (time.Duration(e.DurationUS) * time.Microsecond).Round(time.Microsecond)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.At.Format(time.RFC3339Nano), dash(e.Principal), dash(e.TokenID),
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
