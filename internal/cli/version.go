package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/version"
)

func newVersionCmd(streams IO) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print version, commit and Go version",
		Args:  exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(streams.Out, "commandcore %s (commit %s, %s)\n", version.Version, version.Commit, version.GoVersion())
			return err
		},
	}
}
