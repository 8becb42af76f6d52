// Package launcher starts a job's supervisor: as the main process of a
// transient unit of the systemd user manager (StartTransientUnit over the
// user bus), or, without a user manager, as an independent session. The
// private envelope travels only through a pipe on the supervisor's stdin.
package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobresources"
	"github.com/commandcore/commandcore/internal/limits"
)

// OOMScoreAdjust makes a job's processes preferred OOM victims over the
// agent and the rest of the user's session.
const OOMScoreAdjust = 500

// unitStopTimeout bounds stopping an abandoned launch's unit: systemd
// sends SIGTERM, then SIGKILL after the unit's own stop timeout.
const unitStopTimeout = 10 * time.Second

// UnitName returns the transient unit name of a job.
func UnitName(deviceID, jobID string) string {
	return jobmeta.UnitPrefix + deviceID + "-" + jobID + ".service"
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
	// Hide, when set, are the agent's own directories, hidden from every
	// job unit (set only where ProbeHiding found that this works).
	Hide *Hidden

	mu   sync.Mutex
	conn *sdbus.Conn
}

// New returns a Launcher that re-executes exe.
func New(exe string, installed bool) *Launcher {
	return &Launcher{Exe: exe, Installed: installed}
}

// Close releases the bus connection.
func (l *Launcher) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.Close()
		l.conn = nil
	}
}

// Bus returns a connection to the user manager, reconnecting if the last
// one broke (the manager may have restarted), or an error when none is
// reachable.
func (l *Launcher) Bus(_ context.Context) (*sdbus.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil && l.conn.Connected() {
		return l.conn, nil
	}
	if l.conn != nil {
		l.conn.Close()
		l.conn = nil
	}
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" && os.Getenv("XDG_RUNTIME_DIR") == "" {
		return nil, errors.New("no user bus address in the environment")
	}
	c, err := connectBounded(func() (*sdbus.Conn, error) {
		// go-systemd ties the connection's lifetime to the context it was
		// made with, so the cached connection must not use a request's.
		return sdbus.NewUserConnectionContext(context.Background())
	}, l.connectTimeout())
	if err != nil {
		return nil, fmt.Errorf("connect to the user bus: %w", err)
	}
	l.conn = c
	return c, nil
}

// busConnectTimeout bounds connecting to the user bus. The handshake has no
// deadline of its own, and a bus that accepts but never answers would
// otherwise hold every caller of Bus (launches and status alike) forever.
const busConnectTimeout = 5 * time.Second

func (l *Launcher) connectTimeout() time.Duration {
	if l.ConnectTimeout > 0 {
		return l.ConnectTimeout
	}
	return busConnectTimeout
}

// errBusTimeout reports a bus that did not complete its handshake in time.
var errBusTimeout = errors.New("the user bus did not answer in time")

// connectBounded runs connect, giving up after d; a connection that
// completes later is closed.
func connectBounded(connect func() (*sdbus.Conn, error), d time.Duration) (*sdbus.Conn, error) {
	type result struct {
		c   *sdbus.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := connect()
		done <- result{c, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-done:
		return r.c, r.err
	case <-t.C:
		go func() {
			if r := <-done; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, errBusTimeout
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

// ErrSupervisorFailed reports a supervisor that ended before it claimed
// its identity.
var ErrSupervisorFailed = errors.New("supervisor ended before claiming its identity")

// Spec is one supervisor to start.
type Spec struct {
	Unit      string // unit name; empty for the fallback
	JobDir    string
	Stdin     *os.File // read end of the envelope pipe
	Resources jobresources.Caps
	// Timeout is the job's time limit, 0 for none. The supervisor enforces
	// it; the unit gets only a backstop past it (RuntimeMaxSec).
	Timeout time.Duration
}

// Started is a started supervisor. Stop ends it on a failed launch.
type Started struct {
	// Failed is closed when the supervisor is known to have ended before
	// claiming its identity (fallback path; a unit's start job reports
	// that itself).
	Failed <-chan struct{}
	stop   func(context.Context) error
}

// Stop ends the supervisor of a launch that is being abandoned.
func (s *Started) Stop(ctx context.Context) error { return s.stop(ctx) }

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
		sdbus.PropExecStart([]string{l.Exe, "supervise", sp.JobDir}, false),
		{Name: "StandardInputFileDescriptor", Value: dbus.MakeVariant(dbus.UnixFD(sp.Stdin.Fd()))},
		{Name: "NoNewPrivileges", Value: dbus.MakeVariant(true)},
		{Name: "OOMScoreAdjust", Value: dbus.MakeVariant(int32(OOMScoreAdjust))},
		{Name: "OOMPolicy", Value: dbus.MakeVariant("kill")},
		{Name: "KillMode", Value: dbus.MakeVariant("control-group")},
	}
	if l.Hide != nil {
		props = append(props, hideProperties(*l.Hide, sp.JobDir)...)
	}
	if sp.Timeout > 0 {
		props = append(props, sdbus.Property{Name: "RuntimeMaxUSec", Value: dbus.MakeVariant(uint64(Backstop(sp.Timeout).Microseconds()))})
	}
	if m := sp.Resources.MemoryMaxBytes; m > 0 {
		props = append(props,
			sdbus.Property{Name: "MemoryMax", Value: dbus.MakeVariant(m)},
			sdbus.Property{Name: "MemorySwapMax", Value: dbus.MakeVariant(uint64(0))},
		)
	}
	return props
}

// Backstop is the RuntimeMaxSec of a job with the given time limit: the
// supervisor stops the job at the limit, escalating to SIGKILL after the
// stop escalation, and systemd steps in only when it could not.
func Backstop(limit time.Duration) time.Duration {
	return limit + limits.StopEscalation + limits.TimeoutBackstopMargin
}

func (l *Launcher) startUnit(ctx context.Context, sp Spec) (*Started, error) {
	conn, err := l.Bus(ctx)
	if err != nil {
		return nil, errcode.Wrap(errcode.SystemdUnavailable, err, "the systemd user manager is not reachable")
	}
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, sp.Unit, "fail", l.UnitProperties(sp), done); err != nil {
		return nil, fmt.Errorf("start transient unit: %w", err)
	}
	stop := func(ctx context.Context) error {
		// Bounded on its own: callers pass contexts whose deadline has
		// already passed (a claim timeout) with it removed.
		ctx, cancel := context.WithTimeout(ctx, unitStopTimeout)
		defer cancel()
		ch := make(chan string, 1)
		if _, err := conn.StopUnitContext(ctx, sp.Unit, "replace", ch); err == nil {
			select {
			case <-ch:
			case <-ctx.Done():
			}
		}
		// A failed unit stays loaded until reset; an abandoned launch
		// leaves nothing behind.
		conn.ResetFailedUnitContext(ctx, sp.Unit)
		return nil
	}
	select {
	case res := <-done:
		if res != "done" {
			stop(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("%w (start job %q)", ErrSupervisorFailed, res)
		}
	case <-ctx.Done():
		stop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("wait for the identity claim: %w", ctx.Err())
	}
	// The start job completed with the supervisor's READY=1, sent after
	// its claim: nothing is left to watch for.
	return &Started{Failed: make(chan struct{}), stop: stop}, nil
}

func (l *Launcher) startFallback(sp Spec) (*Started, error) {
	cmd := exec.Command(l.Exe, "supervise", sp.JobDir)
	cmd.Stdin = sp.Stdin
	// A minimal environment: the job's own environment travels in the
	// envelope, and the agent's service variables (INVOCATION_ID, ...) must
	// not be mistaken for the supervisor's.
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start supervisor: %w", err)
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
	return &Started{Failed: failed, stop: stop}, nil
}
