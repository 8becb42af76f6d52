package systemdtest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/systemdtest"
)

func TestMain(m *testing.M) { systemdtest.Main(m) }

func TestEnsureReuses(t *testing.T) {
	m1, err := systemdtest.Ensure()
	if err != nil {
		t.Fatal(err)
	}
	m2, err := systemdtest.Ensure()
	if err != nil {
		t.Fatal(err)
	}
	if m1.PID() <= 0 || m1.PID() != m2.PID() {
		t.Fatalf("Ensure twice gave PIDs %d and %d, want the same manager", m1.PID(), m2.PID())
	}
	if cur, err := m1.CurrentPID(); err != nil || cur != m1.PID() {
		t.Fatalf("CurrentPID = %d, %v; want %d", cur, err, m1.PID())
	}
	for _, kv := range m1.Env() {
		k, v, _ := strings.Cut(kv, "=")
		if got := os.Getenv(k); got != v {
			t.Errorf("%s = %q in the environment, want %q", k, got, v)
		}
	}
	procs, err := m1.Procs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(procs, m1.PID()) {
		t.Errorf("manager %d not among the cgroup's processes %v", m1.PID(), procs)
	}
}

func TestTransientUnit(t *testing.T) {
	if _, err := systemdtest.Ensure(); err != nil {
		t.Fatal(err)
	}
	conn := connect(t)
	if got := startUnit(t, conn, "/bin/true"); got != "done" {
		t.Fatalf("start job result = %q, want done", got)
	}
}

func TestKillManagerOnly(t *testing.T) {
	systemdtest.Exclusive(t)
	m1, err := systemdtest.Ensure()
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t)
	name, sleeper := startSleeper(t, conn)
	conn.Close()
	before, err := m1.Procs()
	if err != nil {
		t.Fatal(err)
	}
	// Everything but the manager is an orphan once it is gone; the new
	// manager does not adopt them, so this test must reap them itself.
	t.Cleanup(func() { killOrphans(t, m1, slices.DeleteFunc(before, func(p int) bool { return p == m1.PID() })) })

	if err := m1.KillManagerOnly(); err != nil {
		t.Fatal(err)
	}
	if alive(m1.PID()) {
		t.Fatalf("manager %d still alive after KillManagerOnly", m1.PID())
	}
	if !alive(sleeper) {
		t.Fatalf("unit %s main process %d died with the manager", name, sleeper)
	}

	m2, err := systemdtest.Ensure()
	if err != nil {
		t.Fatal(err)
	}
	if m2.PID() == m1.PID() {
		t.Fatalf("Ensure after the kill returned the dead manager %d", m1.PID())
	}
	if got := startUnit(t, connect(t), "/bin/true"); got != "done" {
		t.Fatalf("start job on the new manager = %q, want done", got)
	}
}

func TestKillManagerCgroup(t *testing.T) {
	systemdtest.Exclusive(t)
	m1, err := systemdtest.Ensure()
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t)
	_, sleeper := startSleeper(t, conn)
	conn.Close()

	if err := m1.KillManagerCgroup(); err != nil {
		t.Fatal(err)
	}
	if alive(m1.PID()) || alive(sleeper) {
		t.Fatalf("manager %d or unit process %d survived KillManagerCgroup", m1.PID(), sleeper)
	}
	if procs, err := m1.Procs(); err != nil || len(procs) > 0 {
		t.Fatalf("cgroup still holds %v (%v)", procs, err)
	}

	m2, err := systemdtest.Ensure()
	if err != nil {
		t.Fatal(err)
	}
	if m2.PID() == m1.PID() {
		t.Fatalf("Ensure after the kill returned the dead manager %d", m1.PID())
	}
	if got := startUnit(t, connect(t), "/bin/true"); got != "done" {
		t.Fatalf("start job on the new manager = %q, want done", got)
	}
}

func TestShutdownAndStaleState(t *testing.T) {
	systemdtest.Exclusive(t)
	m1, err := systemdtest.Ensure()
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if alive(m1.PID()) {
		t.Fatalf("manager %d alive after Shutdown", m1.PID())
	}
	for _, p := range append(m1.CgroupDirs(), m1.RuntimeDir()) {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind by Shutdown (stat: %v)", p, err)
		}
	}
	// Shutdown with nothing running is fine (usermgr down relies on it).
	if err := systemdtest.Attach().Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}

	// Stale state from a crashed run: runtime dir with a dead bus socket,
	// empty cgroup directories.
	if err := os.MkdirAll(m1.RuntimeDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	deadSocket(t, filepath.Join(m1.RuntimeDir(), "bus"))
	for _, d := range m1.CgroupDirs() {
		if err := os.MkdirAll(filepath.Join(d, "app.slice", "stale.service"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m2, err := systemdtest.Ensure()
	if err != nil {
		t.Fatalf("Ensure over stale state: %v", err)
	}
	if got := startUnit(t, connect(t), "/bin/true"); got != "done" {
		t.Fatalf("start job on the new manager = %q, want done", got)
	}
	if m2.PID() == m1.PID() {
		t.Fatalf("Ensure returned the stopped manager %d", m1.PID())
	}
}

// deadSocket leaves a unix socket file nobody listens on.
func deadSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}

func connect(t *testing.T) *sdbus.Conn {
	t.Helper()
	// The context is the connection's lifetime, not a dial timeout: godbus
	// closes the connection when it is done.
	conn, err := sdbus.NewUserConnectionContext(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

var unitSeq atomic.Int64

func unitName(prefix string) string {
	return fmt.Sprintf("systemdtest-%s-%d-%d.service", prefix, os.Getpid(), unitSeq.Add(1))
}

// startUnit starts argv as a transient Type=exec unit and returns the start
// job's result.
func startUnit(t *testing.T, conn *sdbus.Conn, argv ...string) string {
	t.Helper()
	res, _ := startNamed(t, conn, unitName("run"), argv...)
	return res
}

func startNamed(t *testing.T, conn *sdbus.Conn, name string, argv ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := make(chan string, 1)
	props := []sdbus.Property{sdbus.PropExecStart(argv, true), sdbus.PropType("exec")}
	if _, err := conn.StartTransientUnitContext(ctx, name, "fail", props, ch); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-ch:
		return res, name
	case <-ctx.Done():
		t.Fatalf("start job for %s did not finish", name)
		return "", ""
	}
}

// startSleeper starts a long-running unit and returns its name and main PID.
func startSleeper(t *testing.T, conn *sdbus.Conn) (string, int) {
	t.Helper()
	res, name := startNamed(t, conn, unitName("sleep"), "/bin/sleep", "300")
	if res != "done" {
		t.Fatalf("start job for %s = %q", name, res)
	}
	p, err := conn.GetServicePropertyContext(context.Background(), name, "MainPID")
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := p.Value.Value().(uint32)
	if pid == 0 {
		t.Fatalf("%s has no main PID", name)
	}
	return name, int(pid)
}

// alive reports whether pid exists and is not a zombie (PID 1 here reaps
// slowly).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := len(data) - 1
	for i >= 0 && data[i] != ')' {
		i--
	}
	return i+2 < len(data) && data[i+2] != 'Z'
}

// killOrphans SIGKILLs the given PIDs if they are still in the manager's
// cgroup, and waits for them to die.
func killOrphans(t *testing.T, m *systemdtest.Manager, pids []int) {
	t.Helper()
	now, err := m.Procs()
	if err != nil {
		t.Error(err)
		return
	}
	for _, pid := range pids {
		if !slices.Contains(now, pid) {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 5000)
		unix.Close(fd)
		if alive(pid) {
			t.Errorf("orphan %d survived SIGKILL", pid)
		}
	}
}
