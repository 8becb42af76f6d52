package cli

import (
	"fmt"
	"github.com/commandcore/commandcore/internal/humantime"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/relay"
	"github.com/commandcore/commandcore/internal/relay/store"
)

type devicesOptions struct {
	relayOptions
	JSON bool
}

func newRelayDevicesCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &devicesOptions{relayOptions: newRelayOptions(g, streams)}
	cmd := &cobra.Command{
		Use:   "devices [--json]",
		Short: "Enrolled devices with connection state and last-seen time",
		Args:  exactArgs(0),
		RunE:  func(*cobra.Command, []string) error { return runDevices(o) },
	}
	cmd.Flags().BoolVar(&o.JSON, "json", false, "one JSON object per line")
	cmd.AddCommand(newDeviceRevokeCmd(g, streams))
	return cmd
}

func runDevices(o *devicesOptions) error {
	var (
		devs     []store.Device
		replicas []store.Replica
	)
	err := o.withState(func(st store.State) (err error) {
		if devs, err = st.Devices(); err != nil {
			return err
		}
		replicas, err = st.Replicas(o.Now())
		return err
	})
	if err != nil {
		return err
	}
	names := map[string]string{}
	for _, r := range replicas {
		names[r.ID] = r.Name
	}
	// A link is held only by a live replica: one that died without
	// saying so still holds nothing.
	for i := range devs {
		if _, live := names[devs[i].Replica]; !live {
			devs[i].Connected, devs[i].Replica = false, ""
		}
	}
	if o.JSON {
		return writeJSONLines(o.IO.Out, devs...)
	}
	tw := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tSTANDING\tCONNECTED\tREPLICA\tLAST SEEN\tAGENT")
	for _, d := range devs {
		// A connected device is seen now: its last-seen time is written
		// only every so often while the link lasts.
		seen := "never"
		switch {
		case d.Connected:
			seen = "connected"
		case d.LastSeen != nil:
			seen = humantime.Time(*d.LastSeen)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\t%s\n", d.Name, d.ID, d.Standing, d.Connected, dash(names[d.Replica]), seen, agentText(d))
	}
	return tw.Flush()
}

func newDeviceRevokeCmd(g *globalFlags, streams IO) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a device (by name or ID): its link ends and its credentials are refused until it is enrolled again",
		Args:  exactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return runDeviceRevoke(g, streams, args[0]) },
	}
}

func runDeviceRevoke(g *globalFlags, streams IO, ref string) error {
	var d *store.Device
	var revoked bool
	o := newRelayOptions(g, streams)
	err := o.withState(func(st store.State) (err error) {
		d, revoked, err = st.RevokeDevice(ref, o.Now())
		return err
	})
	if err != nil {
		return err
	}
	if !revoked {
		fmt.Fprintf(streams.Out, "%s (%s) is %s already; its credentials stay refused\n", d.Name, d.ID, d.Standing)
		return nil
	}
	fmt.Fprintf(streams.Out, "revoked %s (%s); a running relay ends its link within %s\n", d.Name, d.ID, relay.StandingPoll)
	return nil
}

// agentText is the device's agent version as its last link gave it, and
// the version offered when the agent is outdated.
func agentText(d store.Device) string {
	v := dash(d.AgentVersion)
	if d.UpdateOffer != "" {
		v += " (outdated: " + d.UpdateOffer + " offered)"
	}
	return v
}
