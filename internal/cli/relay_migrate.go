package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/relay/store"
)

type migrateOptions struct {
	IO IO
	// From is the state directory of the relay that moves; Database the
	// PostgreSQL URL it moves to (--database or its variable).
	From, Database string
}

func newRelayMigrateCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &migrateOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "migrate --from-state-dir DIR --database URL",
		Short: "Copy a single relay's state (devices, credentials, tokens, grant key, audit) into an empty PostgreSQL database",
		Args:  exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			o.Database = relayDatabase(g)
			return runMigrate(o)
		},
	}
	cmd.Flags().StringVar(&o.From, "from-state-dir", "", "the state directory of the relay to move (its relay.db)")
	return cmd
}

func runMigrate(o *migrateOptions) error {
	if o.From == "" || o.Database == "" {
		return usageError("relay migrate needs --from-state-dir DIR and --database URL")
	}
	from, err := store.Open(o.From)
	if err != nil {
		return err
	}
	defer from.Close()
	to, err := store.OpenPostgres(o.Database)
	if err != nil {
		return err
	}
	defer to.Close()
	counts, err := store.Migrate(from, to)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.IO.Out, "moved %d devices, %d client tokens, %d enrollment codes and %d audit entries; start the relays with --database\n",
		counts["devices"], counts["tokens"], counts["enroll_codes"], counts["audit"])
	return nil
}
