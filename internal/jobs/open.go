package jobs

import (
	"context"
	"os"
	"time"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/launcher"
	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/reconcile"
	"github.com/commandcore/commandcore/internal/statedir"
)

// unitQueryTimeout bounds one question to the user manager during
// reconciliation, so a hung manager cannot hang a listing.
const unitQueryTimeout = 2 * time.Second

// Open assembles the job core over stateDir: the local device ID, the job
// store with its reconciliation hooks, a launcher that re-executes exe as
// the supervisor (installed refuses the shared-cgroup fallback), the
// activity journal and the host-health snapshot. Close it with Close.
func Open(stateDir, exe string, installed bool) (*Service, error) {
	device, err := statedir.LocalDeviceID(stateDir)
	if err != nil {
		return nil, err
	}
	procs := procid.Default()
	store, err := jobstore.Open(stateDir, procs)
	if err != nil {
		return nil, err
	}
	host, err := metrics.NewSource("/proc")
	if err != nil {
		return nil, err
	}
	l := launcher.New(exe, installed)
	l.Procs = procs
	store.UnitEvidence = func(unit string) (*reconcile.UnitEvidence, error) {
		ctx, cancel := context.WithTimeout(context.Background(), unitQueryTimeout)
		defer cancel()
		return l.UnitEvidence(ctx, unit)
	}
	store.ResetUnit = func(unit string) error {
		ctx, cancel := context.WithTimeout(context.Background(), unitQueryTimeout)
		defer cancel()
		return l.ResetUnit(ctx, unit)
	}
	// The journal never fails an operation: without one, nothing is recorded.
	journal, err := activity.Open(statedir.JournalPath(stateDir))
	if err != nil {
		journal = nil
	}
	store.OnReconciled = func(id string, state jobmeta.State) {
		journal.Record(activity.ReconcileEvent(id, state))
	}
	// A replaced or lost user manager is journalled once, when noticed.
	l.OnManagerChange = func(c launcher.ManagerChange) {
		if c.Lost != "" {
			journal.Record(activity.UserManagerEvent(activity.Reason(c.Lost), c.Reachable))
		}
	}
	return &Service{
		hostHealth: func() *metrics.HostHealth { return host.Health(stateDir).Summary() },
		store:      store,
		launcher:   l,
		journal:    journal,
		procs:      procs,
		stateDir:   stateDir,
		deviceID:   device,
		shell:      DefaultShell(),
		baseEnv:    BaseEnvironment(os.Environ()),
	}, nil
}

// HideOwnDirs probes whether the user manager can make the agent's state
// directory and configDir inaccessible to job units and, where it can,
// has every later job unit hide them. It reports which.
func (s *Service) HideOwnDirs(ctx context.Context, configDir string) bool {
	// A unit cannot hide a directory that does not exist; one enrollment
	// creates later would be in sight.
	if err := os.MkdirAll(configDir, 0o700); err != nil {
		return false
	}
	if !s.launcher.ProbeHiding(ctx, s.stateDir, configDir) {
		return false
	}
	s.launcher.Hide = &launcher.Hidden{State: s.stateDir, Config: configDir}
	return true
}
