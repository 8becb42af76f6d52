package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/store"
)

func newEnrollCodeCmd(g *globalFlags, streams IO) *cobra.Command {
	var name, ttl string
	cmd := &cobra.Command{
		Use:   "enroll-code [--name NAME] [--ttl 15m]",
		Short: "Print a one-time enrollment code",
		Args:  exactArgs(0),
		RunE:  func(cmd *cobra.Command, _ []string) error { return runEnrollCode(g, streams, name, ttl) },
	}
	cmd.Flags().StringVar(&name, "name", "", "the device's name (default: the name the device proposes)")
	cmd.Flags().StringVar(&ttl, "ttl", limits.EnrollCodeTTL.String(), "how long the code is valid")
	return cmd
}

func runEnrollCode(g *globalFlags, streams IO, name, ttl string) error {
	if name != "" && !store.ValidDeviceName(name) {
		return usageError("--name: a device name is %s", store.DeviceNameRule)
	}
	d, err := parseTTL(ttl)
	if err != nil {
		return err
	}
	o := newRelayOptions(g, streams)
	return o.withState(func(st store.State) error {
		code, err := st.CreateEnrollCode(name, d, o.Now())
		if err == nil {
			fmt.Fprintln(streams.Out, code)
		}
		return err
	})
}
