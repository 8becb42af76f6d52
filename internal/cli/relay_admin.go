package cli

import (
	"fmt"
	"github.com/commandcore/commandcore/internal/humantime"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/panel"
	"github.com/commandcore/commandcore/internal/relay/store"
)

func newRelayAdminCmd(g *globalFlags, streams IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Manage the people who sign in to the web panel",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError("relay admin needs a subcommand: create, list or revoke")
		},
	}
	cmd.AddCommand(newAdminCreateCmd(g, streams), newAdminListCmd(g, streams), newAdminRevokeCmd(g, streams))
	return cmd
}

type adminCreateOptions struct {
	relayOptions
	Name, TTL, URL string
}

func newAdminCreateCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &adminCreateOptions{relayOptions: newRelayOptions(g, streams)}
	cmd := &cobra.Command{
		Use:   "create NAME [--ttl 15m] [--url URL]",
		Short: "Make NAME a panel admin and print a one-time sign-in URL",
		Args:  exactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			o.Name = args[0]
			return runAdminCreate(o)
		},
	}
	cmd.Flags().StringVar(&o.TTL, "ttl", limits.SignInCodeTTL.String(), "how long the sign-in URL is valid (it works once)")
	cmd.Flags().StringVar(&o.URL, "url", "", "the panel's base URL as the admin reaches it (default: the panel a running relay announced)")
	return cmd
}

// runAdminCreate prints the sign-in URL alone on stdout (for scripts) and
// what it is on stderr.
func runAdminCreate(o *adminCreateOptions) error {
	if !store.ValidAdminName(o.Name) {
		return usageError("NAME: an admin name is 1 to %d characters of letters, digits, '.', '_' and '-'", store.MaxNameBytes)
	}
	d, err := parseTTL(o.TTL)
	if err != nil {
		return err
	}
	if o.URL != "" {
		if u, err := url.Parse(o.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usageError("--url: want the panel's base URL, like https://relay.example:8441")
		}
	}
	return o.withState(func(st store.State) error {
		base := o.URL
		if base == "" {
			reps, err := st.Replicas(o.Now())
			if err != nil {
				return err
			}
			for _, r := range reps {
				if r.Panel != "" {
					base = r.Panel
					break
				}
			}
			if base == "" {
				return usageError("no running relay serves the panel (relay serve --panel-listen ADDR); give its URL with --url")
			}
		}
		code, err := st.CreateSignIn(o.Name, d, o.Now())
		if err != nil {
			return err
		}
		fmt.Fprintf(o.IO.Out, "%s%s?code=%s\n", strings.TrimRight(base, "/"), panel.LoginPath, url.QueryEscape(code))
		fmt.Fprintf(o.IO.Err, "admin %s: open the URL within %s to sign in; it works once.\n", o.Name, d)
		return nil
	})
}

type adminListOptions struct {
	relayOptions
	JSON bool
}

func newAdminListCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &adminListOptions{relayOptions: newRelayOptions(g, streams)}
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List panel admins and their open sessions",
		Args:  exactArgs(0),
		RunE:  func(*cobra.Command, []string) error { return runAdminList(o) },
	}
	cmd.Flags().BoolVar(&o.JSON, "json", false, "one JSON object per line")
	return cmd
}

func runAdminList(o *adminListOptions) error {
	var admins []store.Admin
	err := o.withState(func(st store.State) (err error) {
		admins, err = st.Admins(o.Now())
		return err
	})
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSONLines(o.IO.Out, admins...)
	}
	tw := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCREATED\tSESSIONS\tSTATE")
	for _, a := range admins {
		state := "active"
		if a.RevokedAt != nil {
			state = "revoked " + humantime.Time(*a.RevokedAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", a.Name, humantime.Time(a.CreatedAt), a.Sessions, state)
	}
	return tw.Flush()
}

func newAdminRevokeCmd(g *globalFlags, streams IO) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a panel admin; their sessions end at their next request",
		Args:  exactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			o := newRelayOptions(g, streams)
			if err := o.withState(func(st store.State) error { return st.RevokeAdmin(args[0], o.Now()) }); err != nil {
				return err
			}
			_, err := fmt.Fprintf(o.IO.Out, "revoked admin %s\n", args[0])
			return err
		},
	}
}
