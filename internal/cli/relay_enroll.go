package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/downloads"
	"github.com/commandcore/commandcore/internal/relay/store"
)

func newEnrollCodeCmd(g *globalFlags, streams IO) *cobra.Command {
	var name, ttl, url string
	cmd := &cobra.Command{
		Use:   "enroll-code [--name NAME] [--ttl 15m] [--url URL]",
		Short: "Print a one-time enrollment code, and on stderr the line that installs a device with it",
		Args:  exactArgs(0),
		RunE:  func(cmd *cobra.Command, _ []string) error { return runEnrollCode(g, streams, name, ttl, url) },
	}
	cmd.Flags().StringVar(&name, "name", "", "the device's name (default: the name the device proposes)")
	cmd.Flags().StringVar(&ttl, "ttl", limits.EnrollCodeTTL.String(), "how long the code is valid")
	cmd.Flags().StringVar(&url, "url", "", "the relay's URL as devices reach it, for the install line (default: the relay's --public-url, else the URL a running relay announced)")
	return cmd
}

// runEnrollCode prints the code alone on stdout (for scripts) and the
// line to paste on the device on stderr.
func runEnrollCode(g *globalFlags, streams IO, name, ttl, url string) error {
	if name != "" && !store.ValidDeviceName(name) {
		return usageError("--name: a device name is %s", store.DeviceNameRule)
	}
	d, err := parseTTL(ttl)
	if err != nil {
		return err
	}
	if url != "" {
		if _, err := downloads.Script(url); err != nil {
			return usageError("--url: want the relay's base URL, like https://relay.example:8440")
		}
	}
	o := newRelayOptions(g, streams)
	return o.withState(func(st store.State) error {
		code, err := st.CreateEnrollCode(name, d, o.Now())
		if err != nil {
			return err
		}
		fmt.Fprintln(streams.Out, code)
		if url == "" {
			if url, err = st.PublicURL(); err != nil {
				return err
			}
		}
		if url == "" {
			reps, err := st.Replicas(o.Now())
			if err != nil {
				return err
			}
			if len(reps) > 0 {
				url = reps[0].Address
			}
		}
		if url == "" {
			fmt.Fprintf(streams.Err, "On the device, run (valid %s, once): %s\n(no running relay announced its URL: put the relay's URL in its place, or give --url URL)\n", d, downloads.InstallLine("https://RELAY", code))
			return nil
		}
		fmt.Fprintf(streams.Err, "On the device, run (valid %s, once): %s\n", d, downloads.InstallLine(url, code))
		return nil
	})
}
