package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/humantime"
	"github.com/commandcore/commandcore/internal/relay/store"
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
	cmd.PersistentFlags().StringVar(&g.database, "database", "",
		"the relay's state in PostgreSQL (postgres://…; default $"+relayDatabaseEnv+", else SQLite in the state directory); a password belongs in PGPASSFILE or PGPASSWORD, not here")
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
		newRelayAuditCmd(g, streams), newRelayReplicasCmd(g, streams), newRelayMigrateCmd(g, streams), newRelayAdminCmd(g, streams))
	return cmd
}

// relayOptions is what the relay's administration commands share: where
// they write, how they open the relay's database, and their clock.
type relayOptions struct {
	IO    IO
	State func() (store.State, error)
	Now   func() time.Time
}

func newRelayOptions(g *globalFlags, streams IO) relayOptions {
	return relayOptions{IO: streams, State: func() (store.State, error) { return openRelayState(g) }, Now: time.Now}
}

// withState runs fn on the relay's database and closes it after.
func (o *relayOptions) withState(fn func(store.State) error) error {
	st, err := o.State()
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(st)
}

// parseTTL reads --ttl (humantime.ParseTTL) as a usage error.
func parseTTL(s string) (time.Duration, error) {
	d, err := humantime.ParseTTL(s)
	if err != nil {
		return 0, usageError("--ttl: %q is %v", s, err)
	}
	return d, nil
}
