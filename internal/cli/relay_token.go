package cli

import (
	"fmt"
	"github.com/commandcore/commandcore/internal/humantime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/relay/store"
)

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
	return o.withState(func(st store.State) error {
		tok, secret, err := st.CreateToken(store.TokenSpec{Name: o.Name, Devices: devs, Tools: tls, Principal: o.Principal, TTL: d}, o.Now())
		if err != nil {
			return err
		}
		fmt.Fprintln(o.IO.Out, secret)
		fmt.Fprintf(o.IO.Err, "token %s (%s): principal %s, devices %s, tools %s, expires %s. It is shown only now.\n",
			tok.ID, tok.Name, tok.Principal, strings.Join(tok.Devices, ","), strings.Join(tok.Tools, ","), humantime.Time(tok.ExpiresAt))
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
	var toks []store.Token
	err := o.withState(func(st store.State) (err error) {
		toks, err = st.Tokens()
		return err
	})
	if err != nil {
		return err
	}
	now := o.Now()
	if o.JSON {
		lines := make([]tokenLine, len(toks))
		for i, t := range toks {
			lines[i] = tokenLine{Token: t, State: tokenState(t, now)}
		}
		return writeJSONLines(o.IO.Out, lines...)
	}
	tw := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tNAME\tCLIENT\tPRINCIPAL\tDEVICES\tTOOLS\tCREATED\tLAST USED\tEXPIRES\tSTATE")
	for _, t := range toks {
		state := tokenState(t, now)
		used := "-"
		if t.LastUsedAt != nil {
			used = humantime.Time(*t.LastUsedAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Kind, t.Name, dash(t.Client), t.Principal,
			strings.Join(t.Devices, ","), strings.Join(t.Tools, ","), humantime.Time(t.CreatedAt), used,
			humantime.Time(t.ExpiresAt), state)
	}
	return tw.Flush()
}

// tokenLine is a token as token list --json prints it: its record and
// the state the table shows.
type tokenLine struct {
	store.Token
	State string `json:"state"`
}

// tokenState is a token's state at now: active, revoked or expired.
func tokenState(t store.Token, now time.Time) string {
	switch {
	case t.RevokedAt != nil:
		return "revoked"
	case now.After(t.ExpiresAt):
		return "expired"
	}
	return "active"
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
	if err := o.withState(func(st store.State) error { return st.RevokeToken(o.ID, o.Now()) }); err != nil {
		return err
	}
	_, err := fmt.Fprintf(o.IO.Out, "revoked %s\n", o.ID)
	return err
}
