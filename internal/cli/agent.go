package cli

import (
	"fmt"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/status"
	"github.com/commandcore/commandcore/internal/version"
)

// reconcileEvery is how often the agent looks at every job, so losses are
// classified (and journalled) even when no client asks.
const reconcileEvery = 10 * time.Second

func newAgentCmd(g *globalFlags) *cobra.Command {
	var installed bool
	every := reconcileEvery
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the agent (installed as a systemd user service)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), unix.SIGINT, unix.SIGTERM)
			defer stop()
			svc, err := openService(g, installed || runningAsService())
			if err != nil {
				return err
			}
			defer svc.Close()
			self, err := svc.Procs.Self()
			if err != nil {
				return fmt.Errorf("own identity: %w", err)
			}
			boot, err := svc.Procs.BootID()
			if err != nil {
				return fmt.Errorf("boot id: %w", err)
			}
			now := time.Now().UTC()
			rt := &status.Runtime{
				Schema: status.RuntimeSchema, PID: self.PID, StartTicks: self.StartTicks, BootID: boot,
				Version: version.Version, StartedAt: now, Service: g.serviceName(),
				// The link to a server arrives with enrollment; until then
				// the agent manages jobs locally and says so.
				Connection: status.Connection{State: status.ConnNotEnrolled, ObservedAt: now, Since: now},
			}
			runtimePath := filepath.Join(svc.StateDir, status.RuntimeFile)
			if err := jobmeta.WriteAtomic(runtimePath, rt); err != nil {
				return fmt.Errorf("write runtime record: %w", err)
			}
			svc.Journal.Record(activity.Event{Kind: activity.KindAgentStart, Outcome: activity.OutcomeOK})
			// READY only now: state and journal are open, jobs reconciled.
			ends := &endWatch{live: map[string]bool{}}
			ends.observe(svc)
			daemon.SdNotify(false, daemon.SdNotifyReady)

			var watchdog <-chan time.Time
			if d, err := daemon.SdWatchdogEnabled(false); err == nil && d > 0 {
				t := time.NewTicker(d / 2)
				defer t.Stop()
				watchdog = t.C
			}
			if every <= 0 {
				return usageError("--reconcile-every must be positive")
			}
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					daemon.SdNotify(false, daemon.SdNotifyStopping)
					svc.Journal.Record(activity.Event{Kind: activity.KindAgentStop, Outcome: activity.OutcomeOK})
					return nil
				case <-watchdog:
					daemon.SdNotify(false, daemon.SdNotifyWatchdog)
				case <-tick.C:
					ends.observe(svc)
					rt.Connection.ObservedAt = time.Now().UTC()
					jobmeta.WriteAtomic(runtimePath, rt)
				}
			}
		},
	}
	cmd.Flags().BoolVar(&installed, "installed", false, "behave as an installed service: refuse jobs outside the systemd user manager")
	cmd.Flags().DurationVar(&every, "reconcile-every", reconcileEvery, "how often to look at every job")
	cmd.Flags().MarkHidden("reconcile-every")
	return cmd
}

// endWatch journals each job's end once: a job the agent saw live and now
// sees terminal.
type endWatch struct {
	live map[string]bool
}

func (w *endWatch) observe(svc *jobs.Service) {
	recs, err := svc.List()
	if err != nil {
		return
	}
	now := make(map[string]bool, len(recs))
	for _, r := range recs {
		switch {
		case r.State.Live():
			now[r.ProcessID] = true
		case r.Terminal && w.live[r.ProcessID]:
			svc.Journal.Record(activity.JobEndEvent(r.ProcessID, r.State))
		}
	}
	w.live = now
}
