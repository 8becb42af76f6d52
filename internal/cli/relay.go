package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay"
	"github.com/commandcore/commandcore/internal/relaystate"
)

func newRelayCmd(g *globalFlags, streams IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "The reference server: enrolls devices, accepts their links, serves MCP over HTTP",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError("relay needs a subcommand; see commandcore relay --help")
		},
	}
	token := &cobra.Command{
		Use:   "token",
		Short: "Manage client tokens",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError("relay token needs a subcommand: create, list or revoke")
		},
	}
	token.AddCommand(newTokenCreateCmd(g, streams), newTokenListCmd(g, streams), newTokenRevokeCmd(g, streams))
	cmd.AddCommand(newRelayServeCmd(g, streams), newEnrollCodeCmd(g, streams), token, newRelayDevicesCmd(g, streams),
		newRelayAuditCmd(g, streams))
	return cmd
}

// relayOptions is what the relay's administration commands share: where
// they write, how they open the relay's database, and their clock.
type relayOptions struct {
	IO    IO
	State func() (relaystate.State, error)
	Now   func() time.Time
}

func newRelayOptions(g *globalFlags, streams IO) relayOptions {
	return relayOptions{IO: streams, State: func() (relaystate.State, error) { return openRelayState(g) }, Now: time.Now}
}

// withState runs fn on the relay's database and closes it after.
func (o *relayOptions) withState(fn func(relaystate.State) error) error {
	st, err := o.State()
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(st)
}

// parseTTL accepts Go durations plus whole days ("30d").
func parseTTL(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > 3650 {
			return 0, usageError("--ttl: %q is not a number of days between 1 and 3650", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, usageError("--ttl: %q is not a positive duration (like 15m, 12h or 30d)", s)
	}
	return d, nil
}

func newEnrollCodeCmd(g *globalFlags, streams IO) *cobra.Command {
	var name, ttl string
	cmd := &cobra.Command{
		Use:   "enroll-code [--name NAME] [--ttl 15m]",
		Short: "Print a one-time enrollment code",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name != "" && !relaystate.ValidDeviceName(name) {
				return usageError("--name: a device name is %s", relaystate.DeviceNameRule)
			}
			d, err := parseTTL(ttl)
			if err != nil {
				return err
			}
			o := newRelayOptions(g, streams)
			return o.withState(func(st relaystate.State) error {
				code, err := st.CreateEnrollCode(name, d, o.Now())
				if err == nil {
					fmt.Fprintln(streams.Out, code)
				}
				return err
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the device's name (default: the name the device proposes)")
	cmd.Flags().StringVar(&ttl, "ttl", limits.EnrollCodeTTL.String(), "how long the code is valid")
	return cmd
}

type tokenCreateOptions struct {
	relayOptions
	// Name, Devices, Tools, TTL and Principal are the flags as given.
	Name, Devices, Tools, TTL, Principal string
}

func newTokenCreateCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &tokenCreateOptions{relayOptions: newRelayOptions(g, streams)}
	cmd := &cobra.Command{
		Use:   "create --name NAME [--devices LIST] [--tools LIST] [--principal NAME] [--ttl 30d]",
		Short: "Create a client token and print it once",
		Args:  exactArgs(0),
		RunE:  func(*cobra.Command, []string) error { return runTokenCreate(o) },
	}
	cmd.Flags().StringVar(&o.Name, "name", "", "a name for the token")
	cmd.Flags().StringVar(&o.Devices, "devices", "*", "devices the token reaches: names or IDs, comma-separated, * for all")
	cmd.Flags().StringVar(&o.Tools, "tools", "*", "tools the token may call: names or prefix.*, comma-separated, * for all")
	cmd.Flags().StringVar(&o.TTL, "ttl", "30d", "how long the token is valid")
	cmd.Flags().StringVar(&o.Principal, "principal", "", "whose jobs the token acts on; tokens that share one see the same jobs (default: the token's own ID)")
	return cmd
}

// runTokenCreate prints the new token's secret alone on stdout (for
// scripts) and what it grants on stderr.
func runTokenCreate(o *tokenCreateOptions) error {
	if o.Name == "" {
		return usageError("token create needs --name")
	}
	d, err := parseTTL(o.TTL)
	if err != nil {
		return err
	}
	devs, err := authz.ParseScopes(o.Devices)
	if err != nil {
		return usageError("--devices: %v", err)
	}
	tls, err := authz.ParseScopes(o.Tools)
	if err != nil {
		return usageError("--tools: %v", err)
	}
	return o.withState(func(st relaystate.State) error {
		tok, secret, err := st.CreateToken(relaystate.TokenSpec{Name: o.Name, Devices: devs, Tools: tls, Principal: o.Principal, TTL: d}, o.Now())
		if err != nil {
			return err
		}
		fmt.Fprintln(o.IO.Out, secret)
		fmt.Fprintf(o.IO.Err, "token %s (%s): principal %s, devices %s, tools %s, expires %s. It is shown only now.\n",
			tok.ID, tok.Name, tok.Principal, strings.Join(tok.Devices, ","), strings.Join(tok.Tools, ","), tok.ExpiresAt.Format(time.RFC3339))
		return nil
	})
}

type tokenListOptions struct {
	relayOptions
	JSON bool
}

func newTokenListCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &tokenListOptions{relayOptions: newRelayOptions(g, streams)}
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List client tokens (never their secrets)",
		Args:  exactArgs(0),
		RunE:  func(*cobra.Command, []string) error { return runTokenList(o) },
	}
	cmd.Flags().BoolVar(&o.JSON, "json", false, "one JSON object per line")
	return cmd
}

func runTokenList(o *tokenListOptions) error {
	var toks []relaystate.Token
	err := o.withState(func(st relaystate.State) (err error) {
		toks, err = st.Tokens()
		return err
	})
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSONLines(o.IO.Out, toks...)
	}
	tw := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPRINCIPAL\tDEVICES\tTOOLS\tEXPIRES\tSTATE")
	now := o.Now()
	for _, t := range toks {
		state := "active"
		switch {
		case t.RevokedAt != nil:
			state = "revoked"
		case now.After(t.ExpiresAt):
			state = "expired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Principal, strings.Join(t.Devices, ","),
			strings.Join(t.Tools, ","), t.ExpiresAt.Format(time.RFC3339), state)
	}
	return tw.Flush()
}

type tokenRevokeOptions struct {
	relayOptions
	ID string
}

func newTokenRevokeCmd(g *globalFlags, streams IO) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a client token; it is refused from its next request on",
		Args:  exactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return runTokenRevoke(&tokenRevokeOptions{relayOptions: newRelayOptions(g, streams), ID: args[0]})
		},
	}
}

func runTokenRevoke(o *tokenRevokeOptions) error {
	if err := o.withState(func(st relaystate.State) error { return st.RevokeToken(o.ID, o.Now()) }); err != nil {
		return err
	}
	_, err := fmt.Fprintf(o.IO.Out, "revoked %s\n", o.ID)
	return err
}

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
	var devs []relaystate.Device
	err := o.withState(func(st relaystate.State) (err error) {
		devs, err = st.Devices()
		return err
	})
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSONLines(o.IO.Out, devs...)
	}
	tw := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tSTANDING\tCONNECTED\tLAST SEEN")
	for _, d := range devs {
		seen := "never"
		if d.LastSeen != nil {
			seen = d.LastSeen.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\n", d.Name, d.ID, d.Standing, d.Connected, seen)
	}
	return tw.Flush()
}

func newDeviceRevokeCmd(g *globalFlags, streams IO) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a device (by name or ID): its link ends and its credentials are refused until it is enrolled again",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var d *relaystate.Device
			var revoked bool
			o := newRelayOptions(g, streams)
			err := o.withState(func(st relaystate.State) (err error) {
				d, revoked, err = st.RevokeDevice(args[0], o.Now())
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
		},
	}
}
