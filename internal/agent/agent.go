// Package agent is the daemon `commandcore agent` runs: it keeps the
// runtime record `commandcore status` verifies, reconciles every job on a
// tick (journalling each end once, and resetting the failed units of jobs
// whose end is on record), answers the systemd watchdog and, once
// the device is enrolled, serves the tools over the link to its server,
// picking up an enrollment made while it runs.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/enrollment"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/status"
	"github.com/commandcore/commandcore/internal/version"
)

// ReconcileEvery is how often the agent looks at every job, so losses are
// classified (and journalled) even when no client asks. An enrollment made
// while the agent runs is picked up as often.
const ReconcileEvery = 10 * time.Second

// Config is what one agent runs over.
type Config struct {
	StateDir  string
	ConfigDir string
	// Exe is re-executed as each job's supervisor.
	Exe string
	// Installed refuses jobs outside the systemd user manager.
	Installed bool
	// Servers, when set, replace the server URLs the device enrolled with.
	Servers []string
	// ReconcileEvery is the tick; zero means ReconcileEvery.
	ReconcileEvery time.Duration
	// Log, when set, gets one content-free line per activity event (link
	// up and down, each tool call, job ends): what the journal records.
	Log io.Writer
}

// Run runs the agent until ctx ends, then waits for the link to close.
func Run(ctx context.Context, cfg Config) error {
	every := cfg.ReconcileEvery
	if every == 0 {
		every = ReconcileEvery
	}
	svc, err := jobs.Open(cfg.StateDir, cfg.Exe, cfg.Installed)
	if err != nil {
		return err
	}
	defer svc.Close()
	svc.KeepSpares()
	if cfg.Log != nil {
		svc.Journal().Echo(cfg.Log, "agent: ")
	}
	self, err := svc.Procs().Self()
	if err != nil {
		return fmt.Errorf("own identity: %w", err)
	}
	boot, err := svc.Procs().BootID()
	if err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	// Without an enrollment credential the agent manages jobs locally and says it is
	// not enrolled.
	id, err := enrollment.Load(cfg.ConfigDir)
	if err != nil && !errors.Is(err, enrollment.ErrNotEnrolled) {
		return err
	}
	hidden := svc.HideOwnDirs(ctx, cfg.ConfigDir, authz.JobsCutOff(cfg.ConfigDir))
	now := time.Now().UTC()
	rt := newRuntimeRecord(cfg.StateDir, status.Runtime{
		Schema: status.RuntimeSchema, PID: self.PID, StartTicks: self.StartTicks, BootID: boot,
		Version: version.Version, StartedAt: now, Service: ownUnit(),
		Connection:      status.Connection{State: status.ConnNotEnrolled, ObservedAt: now, Since: now},
		AgentDirsHidden: hidden.Units,
		RunDirsHidden:   hidden.Run,
		Systemd:         systemdView(ctx, svc),
		Exe:             cfg.Exe,
		AgentBinary: &status.AgentBinary{Dir: hidden.Binary.Dir, Writable: hidden.Binary.Writable, Shared: hidden.Binary.Shared,
			ReadOnlyInJobUnits: hidden.UnitsBinary, ReadOnlyInRun: hidden.RunBinary},
	})
	if err := rt.write(); err != nil {
		return err
	}
	svc.Journal().Record(activity.Event{Kind: activity.KindAgentStart, Outcome: activity.OutcomeOK})
	// READY only now: state and journal are open, jobs reconciled.
	ends := &endWatch{live: map[string]bool{}}
	ends.observe(svc)
	svc.ReleaseUnits(ctx)
	daemon.SdNotify(false, daemon.SdNotifyReady)

	up := &serverLink{svc: svc, rt: rt, stateDir: cfg.StateDir, configDir: cfg.ConfigDir, servers: cfg.Servers, startedAt: now,
		updates: &updater{ctx: ctx, journal: svc.Journal(), rt: rt, exe: cfg.Exe, stateDir: cfg.StateDir}}
	if id != nil {
		if err := up.start(ctx, id); err != nil {
			return err
		}
	}
	loop(ctx, every, func() {
		ends.observe(svc)
		svc.ReleaseUnits(ctx)
		rt.observe(systemdView(ctx, svc))
		up.pickUp(ctx)
	})
	daemon.SdNotify(false, daemon.SdNotifyStopping)
	up.wait()
	rt.stop()
	svc.Journal().Record(activity.Event{Kind: activity.KindAgentStop, Outcome: activity.OutcomeOK})
	return nil
}

// loop calls tick every interval and answers the systemd watchdog (when
// the unit has one) until ctx ends.
func loop(ctx context.Context, every time.Duration, tick func()) {
	var watchdog <-chan time.Time
	if d, err := daemon.SdWatchdogEnabled(false); err == nil && d > 0 {
		t := time.NewTicker(d / 2)
		defer t.Stop()
		watchdog = t.C
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-watchdog:
			daemon.SdNotify(false, daemon.SdNotifyWatchdog)
		case <-ticker.C:
			tick()
		}
	}
}
