// Package systemdtest boots and shares a real `systemd --user` manager for
// tests.
//
// The machines this project is tested on are VMs whose PID 1 is not systemd,
// but systemd and D-Bus are installed and tests run as root, so a user manager
// can be booted by hand (see /work/shared/SYSTEMD-TESTING.md for the measured
// recipe). Only one manager per uid can own /run/user/U and its bus, while
// `go test ./...` runs packages as parallel processes, so the manager is
// shared: [Ensure] reuses a ready manager or boots one under a file lock, and
// the booted manager outlives the process that booted it. Teardown happens
// once, at the end of the run ([Manager.Shutdown], e.g. via
// `go run ./internal/systemdtest/cmd/usermgr down`).
//
// A package's TestMain should call [Main]. Tests that kill or stop the
// manager must call [Exclusive] first so they do not pull the manager out
// from under tests running in other packages.
package systemdtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	godbus "github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

const (
	systemdBinary = "/usr/lib/systemd/systemd"

	// bootLockPath serializes boots and teardowns across test processes.
	bootLockPath = "/run/commandcore-test-usermgr.lock"

	// bootTimeout bounds the wait for a freshly booted manager; boot to
	// ready takes about 115 ms on an idle machine.
	bootTimeout = 5 * time.Second
	// staleGrace is how long an existing but unresponsive manager gets to
	// answer before it is treated as stale: parallel test binaries can load
	// the machine enough to make a healthy manager slow.
	staleGrace = 3 * time.Second
	// probeTimeout bounds one readiness probe over the bus.
	probeTimeout = time.Second
	// stopTimeout bounds each wait for processes to exit.
	stopTimeout = 5 * time.Second

	managerPath  = "/org/freedesktop/systemd1"
	managerName  = "org.freedesktop.systemd1"
	managerIface = "org.freedesktop.systemd1.Manager"
)

// Manager is a handle on the systemd user manager of the current uid.
type Manager struct {
	uid, gid   int
	pid        int
	runtimeDir string
	busAddress string
	cgroupRel  string // e.g. /user.slice/user-0.slice/user@0.service
}

func newManager() *Manager {
	uid, gid := os.Getuid(), os.Getgid()
	runtimeDir := fmt.Sprintf("/run/user/%d", uid)
	return &Manager{
		uid:        uid,
		gid:        gid,
		runtimeDir: runtimeDir,
		busAddress: "unix:path=" + filepath.Join(runtimeDir, "bus"),
		cgroupRel:  fmt.Sprintf("/user.slice/user-%d.slice/user@%d.service", uid, uid),
	}
}

// Attach returns a handle on the current uid's user manager without booting
// one. PID reports 0 if no manager is ready. Use it for teardown.
func Attach() *Manager {
	m := newManager()
	if pid, err := m.probe(); err == nil {
		m.pid = pid
	}
	return m
}

// Ensure returns a ready user manager for the current uid, booting one if
// none answers on /run/user/U/bus. It sets XDG_RUNTIME_DIR and
// DBUS_SESSION_BUS_ADDRESS in the process environment so code under test and
// its children find the user bus.
func Ensure() (*Manager, error) {
	m := newManager()
	if err := m.ensure(); err != nil {
		return nil, err
	}
	for _, kv := range m.envPairs() {
		if err := os.Setenv(kv[0], kv[1]); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Manager) ensure() error {
	if pid, err := m.probe(); err == nil {
		m.pid = pid
		return nil
	}
	unlock, err := lockFile(bootLockPath, unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()

	// Another process may have booted one while we waited for the lock.
	if pid, err := m.probe(); err == nil {
		m.pid = pid
		return nil
	}
	if hostRunsSystemd() {
		return errors.New("systemdtest: PID 1 is systemd but no user manager answers; refusing to boot a second one")
	}
	// A manager process that does not answer is either slow or stale. No
	// boot is in progress (we hold the lock), so after a grace period it is
	// stale: kill it, but leave unit processes alone (tests may rely on them
	// surviving a manager restart).
	if pids, _ := m.managerCandidates(); len(pids) > 0 {
		if pid, err := m.waitReady(staleGrace, nil); err == nil {
			m.pid = pid
			return nil
		}
		for _, pid := range pids {
			if err := m.killAndWait(pid, unix.SIGKILL); err != nil {
				return fmt.Errorf("systemdtest: killing stale manager %d: %w", pid, err)
			}
		}
	}
	if err := m.prepare(); err != nil {
		return err
	}
	return m.boot()
}

// PID returns the PID of the manager as found (or booted) when the handle was
// made. See CurrentPID for the manager running now.
func (m *Manager) PID() int { return m.pid }

// UID returns the uid the manager runs as.
func (m *Manager) UID() int { return m.uid }

// RuntimeDir returns /run/user/U.
func (m *Manager) RuntimeDir() string { return m.runtimeDir }

// BusAddress returns the user bus address.
func (m *Manager) BusAddress() string { return m.busAddress }

// Env returns the environment pairs ("KEY=value") that point a client at the
// manager's bus.
func (m *Manager) Env() []string {
	var env []string
	for _, kv := range m.envPairs() {
		env = append(env, kv[0]+"="+kv[1])
	}
	return env
}

func (m *Manager) envPairs() [][2]string {
	return [][2]string{
		{"XDG_RUNTIME_DIR", m.runtimeDir},
		{"DBUS_SESSION_BUS_ADDRESS", m.busAddress},
	}
}

// LogPath is where the manager's stdout and stderr go. They must not be the
// test's pipes: `go test` waits for those to close, which a long-lived daemon
// never does.
func (m *Manager) LogPath() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("commandcore-usermgr-%d.log", m.uid))
}

// CurrentPID returns the PID of the manager running now: the owner of
// org.freedesktop.systemd1 on the bus or, if the bus does not answer, the
// systemd process in the manager's init.scope.
func (m *Manager) CurrentPID() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	if pid, _, err := m.query(ctx, false); err == nil {
		return pid, nil
	}
	pids, err := m.managerCandidates()
	if err != nil {
		return 0, err
	}
	for _, pid := range pids {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); string(comm) == "systemd\n" {
			return pid, nil
		}
	}
	return 0, errors.New("systemdtest: no user manager is running")
}

// probe reports the manager PID if the manager answers and is up.
func (m *Manager) probe() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	pid, _, err := m.query(ctx, true)
	return pid, err
}

// query asks the bus for the PID owning org.freedesktop.systemd1 and, if
// wantReady, requires SystemState to be running or degraded.
func (m *Manager) query(ctx context.Context, wantReady bool) (int, string, error) {
	conn, err := godbus.Connect(m.busAddress, godbus.WithContext(ctx))
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	var state string
	if wantReady {
		// NoAutoStart: a stale dbus-daemon must not try to activate systemd.
		var v godbus.Variant
		err := conn.Object(managerName, managerPath).CallWithContext(ctx,
			"org.freedesktop.DBus.Properties.Get", godbus.FlagNoAutoStart,
			managerIface, "SystemState").Store(&v)
		if err != nil {
			return 0, "", err
		}
		state, _ = v.Value().(string)
		if state != "running" && state != "degraded" {
			return 0, state, fmt.Errorf("systemdtest: user manager state is %q", state)
		}
	}
	var pid uint32
	err = conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixProcessID",
		0, managerName).Store(&pid)
	if err != nil {
		return 0, "", err
	}
	return int(pid), state, nil
}

// waitReady polls until the manager is ready or timeout passes; exited, if
// not nil, aborts the wait when the booted process dies.
func (m *Manager) waitReady(timeout time.Duration, exited <-chan error) (int, error) {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		pid, err := m.probe()
		if err == nil {
			return pid, nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("systemdtest: user manager not ready after %v: %w", timeout, lastErr)
		}
		select {
		case err := <-exited:
			return 0, fmt.Errorf("systemdtest: user manager exited during boot (%v); see %s", err, m.LogPath())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// prepare creates what systemd --user expects from logind and the system
// manager on a real host.
func (m *Manager) prepare() error {
	// systemd refuses --user unless this exists.
	if err := os.MkdirAll("/run/systemd/system", 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(m.runtimeDir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(m.runtimeDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.Chown(m.runtimeDir, m.uid, m.gid); err != nil {
		return err
	}
	if err := os.Chmod(m.runtimeDir, 0o700); err != nil {
		return err
	}
	// A stale bus socket may still be served by an orphaned dbus-daemon of a
	// killed manager; remove it so the new manager cannot attach to that bus
	// before its own dbus.socket is listening.
	if err := os.Remove(filepath.Join(m.runtimeDir, "bus")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := h.root + m.cgroupRel
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		// Delegate the cgroup as the system manager would (a no-op for root).
		for _, p := range []string{dir, dir + "/cgroup.procs", dir + "/cgroup.subtree_control", dir + "/cgroup.threads"} {
			if err := os.Chown(p, m.uid, m.gid); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// bootScript runs in a new session, moves itself into the manager's cgroups
// and execs the manager, so the manager starts where a real one would.
const bootScript = `bin=$1; shift
for f in "$@"; do echo $$ > "$f" || exit 1; done
exec "$bin" --user`

func (m *Manager) boot() error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	args := []string{"-c", bootScript, "sh", systemdBinary}
	for _, h := range hs {
		args = append(args, h.root+m.cgroupRel+"/cgroup.procs")
	}
	logf, err := os.OpenFile(m.LogPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own copy
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devNull.Close()
	fmt.Fprintf(logf, "=== systemdtest: booting user manager for uid %d from pid %d at %s\n",
		m.uid, os.Getpid(), time.Now().Format(time.RFC3339Nano))

	home, username := userInfo(m.uid)
	// Ensure runs as the target uid already, so no setpriv is needed.
	cmd := exec.Command("/bin/sh", args...)
	cmd.Env = []string{
		"HOME=" + home,
		"USER=" + username,
		"XDG_RUNTIME_DIR=" + m.runtimeDir,
		"DBUS_SESSION_BUS_ADDRESS=" + m.busAddress,
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	}
	cmd.Dir = "/" // do not pin the test's working directory
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devNull, logf, logf
	// A new session keeps the manager out of the test's process group and
	// terminal signals, so it outlives this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("systemdtest: starting %s: %w", systemdBinary, err)
	}
	// Reap the manager if it dies while we are still its parent; otherwise it
	// is reparented to PID 1 when we exit.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	pid, err := m.waitReady(bootTimeout, exited)
	if err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	if pid != cmd.Process.Pid {
		return fmt.Errorf("systemdtest: bus reports manager pid %d, booted %d", pid, cmd.Process.Pid)
	}
	m.pid = pid
	return nil
}

func userInfo(uid int) (home, name string) {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.HomeDir, u.Username
	}
	home, _ = os.UserHomeDir()
	return home, os.Getenv("USER")
}

// hostRunsSystemd reports whether PID 1 is systemd, in which case the user
// manager belongs to the host and this package must not boot or kill it.
func hostRunsSystemd() bool {
	comm, err := os.ReadFile("/proc/1/comm")
	return err == nil && string(comm) == "systemd\n"
}
