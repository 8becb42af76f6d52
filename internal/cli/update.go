package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/agent"
	"github.com/commandcore/commandcore/internal/install"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/selfupdate"
	"github.com/commandcore/commandcore/internal/statedir"
	"github.com/commandcore/commandcore/internal/status"
)

// updateSettle is how long past the watchdog's wait `commandcore update`
// waits for its verdict: the restarts on either side of the wait.
const updateSettle = 15 * time.Second

func newUpdateCmd(g *globalFlags, streams IO) *cobra.Command {
	var allowDowngrade, noWait bool
	cmd := &cobra.Command{
		Use:   "update [--allow-downgrade] [--no-wait]",
		Short: "Install the agent binary the relay offers, restart the service, and go back if the new agent does not link",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dirs, _, err := installedDirs(g, streams)
			if err != nil {
				return err
			}
			return runUpdate(cmd.Context(), streams, dirs, allowDowngrade, noWait)
		},
	}
	cmd.Flags().BoolVar(&allowDowngrade, "allow-downgrade", false, "install the offered binary even when it is older than the running agent")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the new binary is in place, without waiting for the new agent to link")
	return cmd
}

func runUpdate(ctx context.Context, streams IO, dirs statedir.Dirs, allowDowngrade, noWait bool) error {
	rt, err := status.ReadRuntime(dirs.State)
	if err != nil || rt.StoppedAt != nil {
		return errors.New("no agent is running (commandcore status); an update replaces a running agent's binary")
	}
	if rt.Offer == nil {
		return fmt.Errorf("the relay offers no update: agent %s is what it serves, or its updates are off", rt.Version)
	}
	u := selfupdate.Update{Server: rt.Connection.Server, Offer: selfupdate.Offer{Version: rt.Offer.Version, SHA256: rt.Offer.SHA256, Name: rt.Offer.Name},
		Current: rt.Version, Exe: rt.Exe, Service: rt.Service, StateDir: dirs.State, AllowDowngrade: allowDowngrade}
	err = u.Apply(ctx)
	journal(dirs.State, agent.UpdateEvent(err))
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	fmt.Fprintf(streams.Out, "updating %s from %s to %s: the new binary is in place; the service restarts\n", rt.Service, rt.Version, u.Offer.Version)
	if noWait {
		return nil
	}
	deadline := time.Now().Add(limits.UpdateLinkWait + updateSettle)
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		r, err := selfupdate.ReadRecord(dirs.State)
		if err != nil || r == nil || r.To != u.Offer.Version || r.State == selfupdate.StateStarted {
			continue
		}
		if r.State == selfupdate.StateDone {
			fmt.Fprintf(streams.Out, "updated: agent %s linked\n", r.To)
			return nil
		}
		return fmt.Errorf("update: the new agent did not link within %s; %s", limits.UpdateLinkWait, map[bool]string{
			true:  "the previous binary runs again",
			false: "putting the previous binary back failed (docs/updates.md: rolling back by hand)"}[r.State == selfupdate.StateRolledBack])
	}
	return errors.New("update: no verdict yet from the watchdog; commandcore status shows it when there is one")
}

// journal records e in the agent's journal from this process.
func journal(stateDir string, e activity.Event) {
	j, err := activity.Open(statedir.JournalPath(stateDir))
	if err != nil {
		return
	}
	j.Record(e)
	j.Close()
}

func newUpdateWatchdogCmd(g *globalFlags) *cobra.Command {
	var w selfupdate.Watch
	cmd := &cobra.Command{
		Use:    "update-watchdog --service UNIT --exe PATH --from V --to V",
		Short:  "Restart the agent after an update and put the previous binary back if it does not link (started by update)",
		Args:   exactArgs(0),
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.stateDir == "" || g.service == "" || w.Exe == "" || w.To == "" {
				return usageError("update-watchdog needs --state-dir, --service, --exe and --to")
			}
			service, err := install.ServiceName(g.service)
			if err != nil {
				return usageError("--service: %v", err)
			}
			w.Service, w.StateDir = service, g.stateDir
			e := activity.Event{Kind: activity.KindUpdate, Reason: activity.ReasonUpdateLinked, Outcome: activity.OutcomeOK}
			if state := w.Run(context.WithoutCancel(cmd.Context())); state != selfupdate.StateDone {
				e.Reason, e.Outcome = activity.ReasonUpdateRolledBack, activity.OutcomeFailed
			}
			journal(w.StateDir, e)
			return nil
		},
	}
	cmd.Flags().StringVar(&w.Exe, "exe", "", "the installed binary")
	cmd.Flags().StringVar(&w.From, "from", "", "the version updated from")
	cmd.Flags().StringVar(&w.To, "to", "", "the version updated to")
	return cmd
}
