package jobs

import (
	"context"
	"errors"
	"os"
	"slices"
	"time"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/hideexec"
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
	// Spares a dead launcher left hold no job: their supervisors, given no
	// envelope, are gone.
	if err := store.SweepSpares(); err != nil {
		return nil, err
	}
	// The journal never fails an operation: without one, nothing is recorded.
	journal, err := activity.Open(statedir.JournalPath(stateDir))
	if err != nil {
		journal = nil
	}
	return assemble(stateDir, device, exe, installed, procs, store, journal)
}

// OpenExisting assembles the job core over the jobs an agent left in
// stateDir, for the local CLI, which reads, stops, feeds and reconciles
// jobs but never launches one. It creates nothing: a missing stateDir is an
// error naming it, and no device ID, job store or journal is made (an
// existing journal records reconciliations).
func OpenExisting(stateDir, exe string) (*Service, error) {
	if err := statedir.Existing(stateDir); err != nil {
		return nil, err
	}
	device, err := statedir.ExistingLocalDeviceID(stateDir)
	if err != nil {
		return nil, err
	}
	procs := procid.Default()
	var journal *activity.Journal
	path := statedir.JournalPath(stateDir)
	if _, err := os.Stat(path); err == nil {
		if j, err := activity.Open(path); err == nil {
			journal = j
		}
	}
	return assemble(stateDir, device, exe, false, procs, jobstore.OpenExisting(stateDir, procs), journal)
}

func assemble(stateDir, device, exe string, installed bool, procs *procid.Source, store *jobstore.Store, journal *activity.Journal) (*Service, error) {
	host, err := metrics.NewSource("/proc")
	if err != nil {
		return nil, err
	}
	l := launcher.New(exe, installed)
	l.Procs = procs
	askUnits(store, l, device)
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

// errNotOwnUnit refuses to reset a unit not named for one of this
// device's jobs.
var errNotOwnUnit = errors.New("not a unit of this device's jobs")

// askUnits gives the store its questions to the user manager: what a lost
// supervisor's unit retained, and the reset of a failed unit nothing more
// is to be read from. Only units named for this device's jobs are reset.
func askUnits(store *jobstore.Store, l *launcher.Launcher, device string) {
	store.UnitEvidence = func(unit string) (*reconcile.UnitEvidence, error) {
		ctx, cancel := context.WithTimeout(context.Background(), unitQueryTimeout)
		defer cancel()
		return l.UnitEvidence(ctx, unit)
	}
	store.ResetUnit = func(id, unit string) error {
		if device == "" || unit != launcher.UnitName(device, id) {
			return errNotOwnUnit
		}
		ctx, cancel := context.WithTimeout(context.Background(), unitQueryTimeout)
		defer cancel()
		return l.ResetUnit(ctx, unit)
	}
}

// ReleaseUnits resets the failed units of this device's jobs that nothing
// more is to be read from (jobstore.Store.ReleaseUnit). A unit whose
// RuntimeMaxSec backstop fired, or whose READY went astray, ends failed
// after its supervisor recorded the job's end, and the user manager keeps
// a failed unit loaded until it is reset. One question to the manager
// finds them, however many jobs there are.
func (s *Service) ReleaseUnits(ctx context.Context) {
	if s.deviceID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, unitQueryTimeout)
	defer cancel()
	units, err := s.launcher.FailedUnits(ctx, launcher.DeviceUnitPrefix(s.deviceID))
	if err != nil {
		return
	}
	for _, u := range units {
		if id, ok := launcher.UnitJob(s.deviceID, u); ok {
			s.store.ReleaseUnit(id, u)
		}
	}
}

// Hiding is what HideOwnDirs found: whether job units (Units) and
// process.run commands and the no-systemd fallback's jobs (Run) are kept
// out of the agent's own directories, the directory of the agent's binary
// (Binary), and whether each sees that directory read-only (UnitsBinary,
// RunBinary; both false where Binary.ReadOnly reports false).
type Hiding struct {
	Units, Run             bool
	Binary                 launcher.BinaryDir
	UnitsBinary, RunBinary bool
}

// HideOwnDirs probes whether the user manager can make the agent's state
// directory and configDir inaccessible to job units, and whether the
// hide-exec role can to process.run commands and fallback supervisors
// (the binary re-executed as it needs a mount namespace, which the host
// may refuse), each with the directory of the agent's binary read-only
// (launcher.AgentBinary); where that fails, without it. Each that can
// hides them from then on. It probes too whether job units can start cut
// off from the user manager (CanCutOff), which takes the binary's
// directory and the manager's configuration (launcher.ManagerConfig)
// read-only as well; cutOff is the owner's word, asked at each launch, on
// whether a job or command is to be (authz.JobsCutOff). It reports what it
// found.
func (s *Service) HideOwnDirs(ctx context.Context, configDir string, cutOff func() (bool, error)) Hiding {
	s.ownerCut = cutOff
	// Nothing hides a directory that does not exist; one enrollment
	// creates later would be in sight.
	if err := os.MkdirAll(configDir, 0o700); err != nil {
		return Hiding{}
	}
	h := Hiding{Binary: launcher.AgentBinary(s.launcher.Exe)}
	var binary []string
	if h.Binary.ReadOnly() {
		binary = []string{h.Binary.Dir}
	}
	manager, managerOK := launcher.ManagerConfig()
	if s.launcher.Exe != "" {
		// All a cut takes first, then less: a host that cannot cover
		// everything still covers what it can.
		sockets, _ := launcher.ManagerSockets()
		var tries []hideexec.Covers
		if managerOK {
			tries = append(tries, hideexec.Covers{ReadOnly: binary, Sockets: sockets, CutReadOnly: manager})
		}
		if binary != nil {
			tries = append(tries, hideexec.Covers{ReadOnly: binary, Sockets: sockets})
		}
		for _, c := range append(tries, hideexec.Covers{Sockets: sockets}) {
			if hider := hideexec.Probe(ctx, s.launcher.Exe, s.stateDir, configDir, c); hider != nil {
				s.runHide, s.launcher.FallbackHide, h.Run, h.RunBinary = hider, hider, true, c.ReadOnly != nil
				break
			}
		}
	}
	hide := launcher.Hidden{State: s.stateDir, Config: configDir, ReadOnly: binary}
	if s.launcher.ProbeHiding(ctx, hide) {
		s.launcher.Hide, h.Units, h.UnitsBinary = &hide, true, binary != nil
	} else if plain := (launcher.Hidden{State: s.stateDir, Config: configDir}); binary != nil && s.launcher.ProbeHiding(ctx, plain) {
		s.launcher.Hide, h.Units = &plain, true
	}
	if cut := (launcher.Hidden{State: s.stateDir, Config: configDir, ReadOnly: append(slices.Clip(binary), manager...)}); managerOK && s.launcher.ProbeCut(ctx, cut) {
		s.launcher.Cut = &cut
	}
	return h
}

// CanCutOff reports whether the next job, in domain, and the next
// process.run command could start cut off from the user manager.
func (s *Service) CanCutOff(domain string) (jobs, run bool) {
	return s.launcher.CanCutOff(domain), s.canCutRun()
}

// canCutRun is CanCutOff for process.run: its commands are cut off
// through the hide-exec role, where its probe covered all a cut does.
func (s *Service) canCutRun() bool {
	_, ok := launcher.ManagerSockets()
	return ok && s.runHide != nil && s.runHide.CanCut()
}

// RunConfinement is how process.run starts its next command: through
// hider (nil where the host cannot hide the agent's directories from it)
// and, when cut, cut off from the user manager, as the owner's
// permissions.json says. Where the owner cuts commands off and this host
// cannot, the command is refused.
func (s *Service) RunConfinement() (hider *hideexec.Hider, cut bool, err error) {
	cut, err = s.cutOff()
	if err != nil {
		return nil, false, err
	}
	if cut && !s.canCutRun() {
		return nil, false, errCannotCut("commands")
	}
	return s.runHide, cut, nil
}

// cutOff is the owner's word on whether the next job or command is to
// start out of the user manager's reach; before HideOwnDirs, the local
// CLI's, nothing is cut.
func (s *Service) cutOff() (bool, error) {
	if s.ownerCut == nil {
		return false, nil
	}
	return s.ownerCut()
}

// errCannotCut refuses what the owner wants cut off the user manager
// where this host cannot do it.
func errCannotCut(what string) error {
	return errcode.New(errcode.PermissionDenied,
		"the machine's owner keeps %s off the user manager (permissions.json), which this host cannot do; they are refused", what)
}

// DeviceID is the local device ID this service names its job units with
// ("" for a service opened with OpenExisting over a directory without one).
func (s *Service) DeviceID() string { return s.deviceID }

// JobsDir is the directory that holds this service's job directories.
func (s *Service) JobsDir() string { return s.store.Root() }

// Domain is the failure domain the next job would get, or
// systemd_unavailable (launcher.Launcher.Domain).
func (s *Service) Domain(ctx context.Context) (string, error) { return s.launcher.Domain(ctx) }
