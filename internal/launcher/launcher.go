// Package launcher starts a job's supervisor: as the main process of a
// transient unit of the systemd user manager (StartTransientUnit over the
// user bus), or, without a user manager, as an independent session. The
// private envelope travels only through a pipe on the supervisor's stdin.
package launcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/hideexec"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobresources"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/niceness"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/roles"
)

// OOMScoreAdjust makes a job's processes preferred OOM victims over the
// agent and the rest of the user's session.
const OOMScoreAdjust = 500

// readyWatch is how long a unit's start job is watched for its READY: the
// longest a launch waits for its supervisor's claim, which comes first.
const readyWatch = limits.ClaimTimeout

// unitStopTimeout bounds stopping an abandoned launch's unit: systemd
// sends SIGTERM, then SIGKILL after the unit's own stop timeout.
const unitStopTimeout = 10 * time.Second

// JobSlice is the slice every job unit starts in. By systemd's naming its
// parent is commandcore.slice, a child of the user manager's root slice
// beside app.slice, where the agent's service (and, without Slice=, every
// transient unit) runs: all jobs together then weigh as one unit against
// app.slice, the agent with the user's other applications, instead of one
// unit each, and a job's CPUWeight= weighs it among the jobs only.
const JobSlice = "commandcore-jobs.slice"

// UnitName returns the transient unit name of a job.
func UnitName(deviceID, jobID string) string {
	return DeviceUnitPrefix(deviceID) + jobID + ".service"
}

// DeviceUnitPrefix starts the unit name of every job of a device.
func DeviceUnitPrefix(deviceID string) string {
	return jobmeta.UnitPrefix + deviceID + "-"
}

// UnitJob returns the ID of the device's job whose unit is named unit, and
// whether unit is such a name.
func UnitJob(deviceID, unit string) (string, bool) {
	id := strings.TrimSuffix(strings.TrimPrefix(unit, DeviceUnitPrefix(deviceID)), ".service")
	return id, jobmeta.ValidID(id) && UnitName(deviceID, id) == unit
}

// Launcher starts supervisors.
type Launcher struct {
	// Exe is the commandcore binary re-executed as `supervise`.
	Exe string
	// Installed refuses the shared-cgroup fallback (README): an installed
	// service without its user bus must not run jobs in its own cgroup.
	Installed bool
	// ConnectTimeout bounds connecting to the user bus; zero means
	// busConnectTimeout.
	ConnectTimeout time.Duration
	// Slice is the slice job units start in, JobSlice from New; empty
	// leaves them in the manager's default, as agents before JobSlice did.
	Slice string
	// Hide, when set, are the agent's own directories, hidden from every
	// job unit (set only where ProbeHiding found that this works).
	Hide *Hidden
	// FallbackHide, when set, starts the fallback's supervisors through
	// the hide-exec role, out of sight of the agent's directories but for
	// the job's own, as a unit's Hide does.
	FallbackHide *hideexec.Hider
	// Cut, when set, are the agent's directories a job unit cut off from
	// the user manager hides, in the user namespace it runs in (set only
	// where ProbeCut found that this works); without it no unit is cut
	// off.
	Cut *Hidden

	// Procs identifies the user manager, so that its replacement is
	// noticed; nil skips that check.
	Procs *procid.Source
	// OnManagerChange, when set, is told when the launcher abandons its
	// connection to a user manager (and whether another answers), and
	// when a manager becomes reachable or unreachable. It is called in
	// order, holding the launcher's lock: it must not call the launcher.
	OnManagerChange func(ManagerChange)

	mu  sync.Mutex
	bus *userBus
	// reachable is what OnManagerChange was last told; nil before that.
	reachable *bool
}

// New returns a Launcher that re-executes exe.
func New(exe string, installed bool) *Launcher {
	return &Launcher{Exe: exe, Installed: installed, Slice: JobSlice}
}

// Close releases the bus connection.
func (l *Launcher) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bus != nil {
		l.bus.conn.Close()
		l.bus = nil
	}
}

// Domain returns the failure domain new jobs get, or systemd_unavailable
// for an installed service without its user manager.
func (l *Launcher) Domain(ctx context.Context) (string, error) {
	if _, err := l.Bus(ctx); err == nil {
		return jobmeta.DomainSystemdUnit, nil
	} else if l.Installed {
		return "", errcode.Wrap(errcode.SystemdUnavailable, err,
			"the systemd user manager is not reachable; an installed agent does not run jobs outside it")
	}
	return jobmeta.DomainSharedParentCgroup, nil
}

// Spec is one supervisor to start.
type Spec struct {
	Unit      string // unit name; empty for the fallback
	JobDir    string
	Stdin     *os.File // read end of the envelope pipe
	Resources jobresources.Caps
	// Timeout is the job's time limit, 0 for none. The supervisor enforces
	// it; the unit gets only a backstop past it (RuntimeMaxSec).
	Timeout time.Duration
	// CutOff starts the job out of the user manager's reach (the owner's
	// permissions.json); the caller checked CanCutOff.
	CutOff bool
}

// Started is a started supervisor, or one that may have started: its
// identity claim on disk is what decides. Stop ends it on a failed launch.
type Started struct {
	// Ready is closed when the unit's start job completed, which for a
	// Type=notify unit is the supervisor's READY=1, sent after its claim.
	// It never closes for the fallback, or when READY goes astray (another
	// manager took over the notify socket); it is nil, not to be waited
	// for, when the manager missed the last READY (MissedReady).
	Ready <-chan struct{}
	// Failed is closed when the supervisor is known to have ended, or the
	// unit to have failed, before READY.
	Failed <-chan struct{}
	// PID is the fallback supervisor's process, which the launcher forked
	// (the hide-exec role execs it in its own place); 0 for a unit.
	PID  int
	stop func(context.Context) error
	bus  *userBus
}

// Stop ends the supervisor of a launch that is being abandoned.
func (s *Started) Stop(ctx context.Context) error { return s.stop(ctx) }

// MissedReady tells the launcher that READY did not come when it was due
// (the claim is on disk): the manager's notify socket is taken over. Later
// launches on the same manager do not wait for READY, until one arrives.
func (s *Started) MissedReady() {
	if s.bus != nil {
		s.bus.readyAstray.Store(true)
	}
}

// Start starts the supervisor in the given failure domain.
func (l *Launcher) Start(ctx context.Context, domain string, sp Spec) (*Started, error) {
	if domain == jobmeta.DomainSystemdUnit {
		return l.startUnit(ctx, sp)
	}
	return l.startFallback(sp)
}

// UnitProperties returns the properties of a job's transient unit. They hold
// no command, environment or output: only the job directory reaches the
// supervisor's argument vector.
func (l *Launcher) UnitProperties(sp Spec) []sdbus.Property {
	props := []sdbus.Property{
		sdbus.PropDescription("CommandCore managed job"),
		// notify: the supervisor sends READY=1 once its identity claim is
		// on disk, so the start job's completion is the claim.
		sdbus.PropType("notify"),
		// No start timeout: a READY that goes astray (another manager took
		// over the notify socket) must not get a running job killed. The
		// launcher's own claim timeout bounds the start, rolling back a
		// unit whose supervisor never claims.
		{Name: "TimeoutStartUSec", Value: dbus.MakeVariant(uint64(math.MaxUint64))},
		sdbus.PropExecStart([]string{l.Exe, roles.Supervise, sp.JobDir}, false),
		{Name: "StandardInputFileDescriptor", Value: dbus.MakeVariant(dbus.UnixFD(sp.Stdin.Fd()))},
		{Name: "NoNewPrivileges", Value: dbus.MakeVariant(true)},
		{Name: "OOMScoreAdjust", Value: dbus.MakeVariant(int32(OOMScoreAdjust))},
		{Name: "OOMPolicy", Value: dbus.MakeVariant("kill")},
		{Name: "KillMode", Value: dbus.MakeVariant("control-group")},
	}
	if l.Slice != "" {
		props = append(props, sdbus.PropSlice(l.Slice))
	}
	props = append(props, l.confinement(sp.JobDir, sp.CutOff)...)
	if sp.Timeout > 0 {
		props = append(props, sdbus.Property{Name: "RuntimeMaxUSec", Value: dbus.MakeVariant(uint64(Backstop(sp.Timeout).Microseconds()))})
	}
	if m := sp.Resources.MemoryMaxBytes; m > 0 {
		props = append(props,
			sdbus.Property{Name: "MemoryMax", Value: dbus.MakeVariant(m)},
			sdbus.Property{Name: "MemorySwapMax", Value: dbus.MakeVariant(uint64(0))},
		)
	}
	props = append(props, sdbus.Property{Name: "Nice", Value: dbus.MakeVariant(int32(sp.Resources.JobNice()))})
	if w := sp.Resources.CPUWeight; w > 0 {
		props = append(props, sdbus.Property{Name: "CPUWeight", Value: dbus.MakeVariant(w)})
	}
	return props
}

// Backstop is the RuntimeMaxSec of a job with the given time limit: the
// supervisor stops the job at the limit, escalating to SIGKILL after the
// stop escalation, and systemd steps in only when it could not.
func Backstop(limit time.Duration) time.Duration {
	return limit + limits.StopEscalation + limits.TimeoutBackstopMargin
}

// startUnit asks the user manager to start the job's unit and returns
// without waiting for it: the supervisor's claim on disk, the start job's
// result, or the launch's deadline, whichever comes first, decides. A
// request the manager refused fails here; one that got no answer (the
// manager or its bus went away, the deadline passed) may have started the
// unit all the same, so it is returned as started.
func (l *Launcher) startUnit(ctx context.Context, sp Spec) (*Started, error) {
	b, err := l.userBus(ctx)
	if err != nil {
		return nil, errcode.Wrap(errcode.SystemdUnavailable, err, "the systemd user manager is not reachable")
	}
	ready, failed := make(chan struct{}), make(chan struct{})
	started := &Started{Ready: ready, Failed: failed, stop: func(ctx context.Context) error { return l.stopUnit(ctx, sp.Unit) }, bus: b}
	if b.readyAstray.Load() {
		started.Ready = nil
	}
	done := make(chan string, 1)
	if _, err := b.conn.StartTransientUnitContext(ctx, sp.Unit, "fail", l.UnitProperties(sp), done); err != nil {
		if refused(err) {
			return nil, fmt.Errorf("start transient unit: %w", err)
		}
		return started, nil
	}
	go func() {
		// Watched past the launch's end, so that a READY arriving for a
		// launch that did not wait for it is noticed all the same; a
		// READY that went astray never brings a result.
		watch := time.NewTimer(readyWatch)
		defer watch.Stop()
		select {
		case res := <-done:
			if res == "done" {
				b.readyAstray.Store(false)
				close(ready)
			} else {
				close(failed)
			}
		case <-watch.C:
		}
	}()
	return started, nil
}

// refused reports an error reply of the manager, as opposed to no reply:
// the bus answers NoReply or Disconnected for a manager that went away
// with the request, which it may have carried out.
func refused(err error) bool {
	switch errorName(err) {
	case "":
		return false
	case "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Disconnected",
		"org.freedesktop.DBus.Error.Timeout", "org.freedesktop.DBus.Error.TimedOut":
		return false
	}
	return true
}

// errorName is the name of the bus's error reply err, or "" for an error
// that is none.
func errorName(err error) string {
	var v dbus.Error
	var p *dbus.Error
	switch {
	case errors.As(err, &v):
		return v.Name
	case errors.As(err, &p):
		return p.Name
	}
	return ""
}

// stopUnit stops and resets the unit of an abandoned launch, through the
// current manager.
func (l *Launcher) stopUnit(ctx context.Context, unit string) error {
	// Bounded on its own: callers pass contexts whose deadline has already
	// passed (a claim timeout) with it removed.
	ctx, cancel := context.WithTimeout(ctx, unitStopTimeout)
	defer cancel()
	conn, err := l.Bus(ctx)
	if err != nil {
		return err
	}
	ch := make(chan string, 1)
	if _, err := conn.StopUnitContext(ctx, unit, "replace", ch); err == nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	// A failed unit stays loaded until reset; an abandoned launch leaves
	// nothing behind.
	conn.ResetFailedUnitContext(ctx, unit)
	return nil
}

func (l *Launcher) startFallback(sp Spec) (*Started, error) {
	cmd := exec.Command(l.Exe, roles.Supervise, sp.JobDir)
	cmd.Stdin = sp.Stdin
	// A minimal environment: the job's own environment travels in the
	// envelope, and the agent's service variables (INVOCATION_ID, ...) must
	// not be mistaken for the supervisor's.
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true}
	if l.FallbackHide != nil {
		l.FallbackHide.Wrap(cmd, sp.JobDir, sp.CutOff)
	}
	if err := startNiced(cmd, sp.Resources.JobNice()); err != nil {
		return nil, err
	}
	failed := make(chan struct{})
	// Reap the supervisor when it ends; if the launcher exits first, init
	// (or a subreaper) inherits it.
	go func() {
		cmd.Wait()
		close(failed)
	}()
	stop := func(context.Context) error {
		// The process is our unreaped child until Wait returns, so its PID
		// cannot belong to anyone else yet.
		return cmd.Process.Kill()
	}
	return &Started{Failed: failed, PID: cmd.Process.Pid, stop: stop}, nil
}

// startNiced starts cmd at the job's niceness, as a unit's Nice= would: the
// supervisor and the job it starts inherit it. Niceness belongs to a thread
// and a child inherits the forking thread's, so the fork runs on a thread of
// its own, niced first and discarded afterwards, leaving the agent's other
// threads as they were.
func startNiced(cmd *exec.Cmd, nice int) error {
	start := func() error {
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start supervisor: %w", err)
		}
		return nil
	}
	var err error
	niceness.OnOwnThread(func() {
		// An agent already nicer than the policy leaves the job at its
		// own niceness, which is lower priority still.
		if err = niceness.Lower(nice); err != nil {
			err = fmt.Errorf("lower niceness: %w", err)
			return
		}
		err = start()
	})
	return err
}
