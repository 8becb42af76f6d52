package cli

import (
	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/supervisor"
)

func newSuperviseCmd(streams IO) *cobra.Command {
	return &cobra.Command{
		Use:    "supervise JOB_DIR",
		Short:  "Per-job supervisor (started by the agent; never run by hand)",
		Hidden: true,
		Args:   exactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return supervisor.Run(args[0], streams.In, procid.Default())
		},
	}
}
