package cli

import (
	"fmt"
	"github.com/commandcore/commandcore/internal/humantime"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/relay/store"
)

type replicasOptions struct {
	relayOptions
	JSON bool
}

func newRelayReplicasCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &replicasOptions{relayOptions: newRelayOptions(g, streams)}
	cmd := &cobra.Command{
		Use:   "replicas [--json]",
		Short: "The live relay replicas serving from this state: name, address, links held, since",
		Args:  exactArgs(0),
		RunE:  func(*cobra.Command, []string) error { return runReplicas(o) },
	}
	cmd.Flags().BoolVar(&o.JSON, "json", false, "one JSON object per line")
	return cmd
}

func runReplicas(o *replicasOptions) error {
	var replicas []store.Replica
	err := o.withState(func(st store.State) (err error) {
		replicas, err = st.Replicas(o.Now())
		return err
	})
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSONLines(o.IO.Out, replicas...)
	}
	tw := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tADDRESS\tNATS\tLINKS\tSINCE")
	for _, r := range replicas {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%d\t%s\n", r.Name, r.ID, dash(r.Address), r.NATS, r.Links, humantime.Time(r.StartedAt))
	}
	return tw.Flush()
}
