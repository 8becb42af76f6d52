package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/install"
)

func installOptions(g *globalFlags) (install.Options, error) {
	name, err := install.ServiceName(g.serviceName())
	if err != nil {
		return install.Options{}, usageError("--service: %v", err)
	}
	return install.Options{Service: name, StateDir: g.stateDir, ConfigDir: g.configDir}, nil
}

func newInstallCmd(g *globalFlags, streams IO) *cobra.Command {
	return &cobra.Command{
		Use:   "install",
		Short: "Write, enable and start the agent's systemd user unit (keeps an existing identity and jobs)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := installOptions(g)
			if err != nil {
				return err
			}
			if err := install.Install(cmd.Context(), o); err != nil {
				return err
			}
			path, _ := install.UnitPath(o)
			fmt.Fprintf(streams.Out, "installed and started %s (%s)\n", o.Service, path)
			if lingering, err := install.Lingering(); err == nil && !lingering {
				fmt.Fprintln(streams.Out, "note: the agent runs only while you are logged in; to keep it running, run: sudo loginctl enable-linger \"$USER\"")
			}
			return nil
		},
	}
}

func newUninstallCmd(g *globalFlags, streams IO) *cobra.Command {
	return &cobra.Command{
		Use:   "uninstall",
		Short: "Stop, disable and remove the agent's user unit (state, identity and jobs stay)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := installOptions(g)
			if err != nil {
				return err
			}
			if err := install.Uninstall(cmd.Context(), o); err != nil {
				return err
			}
			fmt.Fprintf(streams.Out, "uninstalled %s; state kept\n", o.Service)
			return nil
		},
	}
}
