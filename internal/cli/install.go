package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/enrollment"
	"github.com/commandcore/commandcore/internal/install"
	"github.com/commandcore/commandcore/internal/statedir"
)

// installOptions are the unit to write for these flags. The unit always
// names the directories this CLI resolves ($XDG_STATE_HOME and
// $XDG_CONFIG_HOME included): the user manager's environment may not have
// the shell's, and the service and the CLI must agree about where state is.
func installOptions(g *globalFlags) (install.Options, statedir.Dirs, error) {
	name, err := install.ServiceName(g.serviceName())
	if err != nil {
		return install.Options{}, statedir.Dirs{}, usageError("--service: %v", err)
	}
	dirs, err := g.dirs()
	if err != nil {
		return install.Options{}, dirs, err
	}
	return install.Options{Service: name, StateDir: dirs.State, ConfigDir: dirs.Config}, dirs, nil
}

func newInstallCmd(g *globalFlags, streams IO) *cobra.Command {
	return &cobra.Command{
		Use:   "install",
		Short: "Write, enable and start the agent's systemd user unit (keeps an existing identity and jobs)",
		Args:  exactArgs(0),
		RunE:  func(cmd *cobra.Command, _ []string) error { return runInstall(cmd.Context(), g, streams) },
	}
}

func runInstall(ctx context.Context, g *globalFlags, streams IO) error {
	o, dirs, err := installOptions(g)
	if err != nil {
		return err
	}
	if err := install.Install(ctx, o); err != nil {
		return err
	}
	path, _ := install.UnitPath(o)
	fmt.Fprintf(streams.Out, "installed and started %s (%s)\nstate: %s\nconfig: %s\n", o.Service, path, dirs.State, dirs.Config)
	if lingering, err := install.Lingering(); err == nil && !lingering {
		fmt.Fprintln(streams.Out, "note: the agent runs only while you are logged in; to keep it running, run: sudo loginctl enable-linger \"$USER\"")
	}
	if _, err := enrollment.Load(dirs.Config); errors.Is(err, enrollment.ErrNotEnrolled) {
		fmt.Fprintf(streams.Out, "next: the agent is not enrolled; get a code from your server and run: COMMANDCORE_ENROLL_CODE=CODE commandcore enroll --server URL%s\n", dirFlags(g, o))
	}
	return nil
}

// dirFlags are the flags another command needs to reach the installation
// o that these flags chose.
func dirFlags(g *globalFlags, o install.Options) string {
	var b strings.Builder
	if o.Service != statedir.DefaultService {
		b.WriteString(" --service " + shellQuote(o.Service))
	}
	if g.configDir != "" {
		b.WriteString(" --config-dir " + shellQuote(o.ConfigDir))
	}
	return b.String()
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._-+=:,@", c))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func newUninstallCmd(g *globalFlags, streams IO) *cobra.Command {
	var purge bool
	cmd := &cobra.Command{
		Use:   "uninstall [--purge]",
		Short: "Stop, disable and remove the agent's user unit (state, identity and jobs stay; the identity goes with --purge)",
		Args:  exactArgs(0),
		RunE:  func(cmd *cobra.Command, _ []string) error { return runUninstall(cmd.Context(), g, streams, purge) },
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "remove this device's identity too, once the unit is gone, telling the relay first that the device leaves (it then shows as removed there)")
	return cmd
}

func runUninstall(ctx context.Context, g *globalFlags, streams IO, purge bool) error {
	o, dirs, err := installOptions(g)
	if err != nil {
		return err
	}
	res, err := install.Uninstall(ctx, o)
	if res != nil {
		for _, f := range res.Removed {
			fmt.Fprintf(streams.Out, "removed %s\n", f)
		}
	}
	if err == nil && purge {
		id, lerr := enrollment.Load(dirs.Config)
		if !errors.Is(lerr, enrollment.ErrNotEnrolled) {
			if id != nil {
				leave(ctx, streams, id)
			}
			if err = enrollment.Remove(dirs.Config); err == nil {
				fmt.Fprintf(streams.Out, "removed %s\n", enrollment.Path(dirs.Config))
			}
		}
	}
	switch {
	case err != nil:
		return err
	case !res.Found:
		fmt.Fprintf(streams.Out, "%s is not installed\n", o.Service)
	case res.Stopped:
		fmt.Fprintf(streams.Out, "stopped, disabled and uninstalled %s; state kept\n", o.Service)
	default:
		fmt.Fprintf(streams.Out, "uninstalled %s; state kept\n", o.Service)
	}
	if _, err := os.Stat(dirs.State); err == nil {
		fmt.Fprintf(streams.Out, "its jobs' records and activity stay in %s (remove them with: rm -rf %s)\n", dirs.State, shellQuote(dirs.State))
	}
	return nil
}

// leaveTimeout bounds telling the relay that the device leaves: an
// uninstall does not wait long for a relay that is away.
const leaveTimeout = 10 * time.Second

// leave tells the relay, with the device's own credential, that it
// leaves for good, before the identity that proves it is deleted; where
// no relay answers, it says what to run there instead.
func leave(ctx context.Context, streams IO, id *enrollment.Credential) {
	ctx, cancel := context.WithTimeout(ctx, leaveTimeout)
	defer cancel()
	server, err := enrollment.Leave(ctx, id)
	if err != nil {
		fmt.Fprintf(streams.Out, "the relay was not told that device %s leaves (%v); there, run: commandcore relay devices revoke %s\n", id.DeviceID, err, id.DeviceID)
		return
	}
	fmt.Fprintf(streams.Out, "told %s that device %s leaves; it shows as removed there\n", server, id.DeviceID)
}
