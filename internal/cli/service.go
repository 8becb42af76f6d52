package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/launcher"
	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/reconcile"
	"github.com/commandcore/commandcore/internal/statedir"
)

// openService builds the job core over the resolved state directory.
// installed makes the launcher refuse the shared-cgroup fallback.
func openService(g *globalFlags, installed bool) (*jobs.Service, error) {
	dirs, err := g.dirs()
	if err != nil {
		return nil, err
	}
	device, err := statedir.DeviceID(dirs.State)
	if err != nil {
		return nil, err
	}
	procs := procid.Default()
	store, err := jobstore.Open(dirs.State, procs)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	l := launcher.New(exe, installed)
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
	journal, err := activity.Open(statedir.JournalPath(dirs.State))
	if err != nil {
		journal = nil
	}
	store.OnReconciled = func(id string, state jobmeta.State) {
		journal.Record(activity.ReconcileEvent(id, state))
	}
	host, err := metrics.NewSource("/proc")
	if err != nil {
		return nil, err
	}
	return &jobs.Service{
		HostHealth: func() any { return host.Health(dirs.State) },
		Store:      store,
		Launcher:   l,
		Journal:    journal,
		Procs:      procs,
		StateDir:   dirs.State,
		DeviceID:   device,
		Shell:      jobs.DefaultShell(),
		BaseEnv:    jobs.BaseEnvironment(os.Environ()),
	}, nil
}

// unitQueryTimeout bounds one question to the user manager during
// reconciliation, so a hung manager cannot hang a listing.
const unitQueryTimeout = 2 * time.Second

// runningAsService reports whether this process is a systemd service
// (systemd sets INVOCATION_ID for every unit it starts).
func runningAsService() bool { return os.Getenv("INVOCATION_ID") != "" }
