package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"github.com/google/uuid"

	"github.com/commandcore/commandcore/internal/hideexec"
	"github.com/commandcore/commandcore/internal/jobresources"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/roles"
	"github.com/commandcore/commandcore/internal/systemdtest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// TestBusThatNeverAnswers: a user bus socket that accepts connections but
// never completes the handshake makes Bus fail after its timeout instead
// of hanging every caller; the fallback domain is chosen, and an installed
// agent refuses.
func TestBusThatNeverAnswers(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "bus")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // accepted, never answered
		}
	}()
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path="+sock)
	l := &Launcher{ConnectTimeout: 200 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		_, err := l.Bus(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errBusTimeout) {
			t.Fatalf("Bus: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Bus hung on a bus that never answers")
	}
	if d, err := l.Domain(context.Background()); err != nil || d != "shared_parent_cgroup" {
		t.Fatalf("domain without a usable bus: %q %v", d, err)
	}
	l.Installed = true
	if _, err := l.Domain(context.Background()); err == nil {
		t.Fatal("an installed agent accepted a bus that never answers")
	}
}

// A job unit hides the agent's directories only where the probe found it
// works, and binds its own job directory back in.
func TestUnitPropertiesHideTheAgentsDirectories(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	sp := Spec{Unit: "u.service", JobDir: "/s/jobs/j", Stdin: r}
	find := func(l *Launcher, name string) any {
		for _, p := range l.UnitProperties(sp) {
			if p.Name == name {
				return p.Value.Value()
			}
		}
		return nil
	}
	l := &Launcher{Exe: "/bin/commandcore"}
	if find(l, "InaccessiblePaths") != nil || find(l, "TemporaryFileSystem") != nil || find(l, "BindPaths") != nil {
		t.Fatal("hiding properties without a successful probe: such a unit would never start here")
	}
	l.Hide = &Hidden{State: "/s", Config: "/c"}
	if got := fmt.Sprint(find(l, "TemporaryFileSystem")); got != "[{/s ro} {/c ro}]" {
		t.Errorf("TemporaryFileSystem = %s", got)
	}
	if got := fmt.Sprint(find(l, "BindPaths")); got != "[{/s/jobs/j /s/jobs/j false 0}]" {
		t.Errorf("BindPaths = %s", got)
	}
}

// TestUnitPropertiesPutEveryJobInTheJobsSlice: a launcher from New starts
// every job unit in commandcore-jobs.slice.
func TestUnitPropertiesPutEveryJobInTheJobsSlice(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var slices []any
	for _, p := range New("/bin/commandcore", false).UnitProperties(Spec{Unit: "u.service", JobDir: "/j", Stdin: r}) {
		if p.Name == "Slice" {
			slices = append(slices, p.Value.Value())
		}
	}
	if fmt.Sprint(slices) != "[commandcore-jobs.slice]" {
		t.Fatalf("Slice properties: %v", slices)
	}
}

// TestUnitBackstopOnlyWithALimit: a job with a time limit gets RuntimeMaxSec
// = limit + 3 s escalation + 5 s margin as a backstop; one without gets none.
func TestUnitBackstopOnlyWithALimit(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	l := &Launcher{Exe: "/bin/commandcore"}
	runtimeMax := func(sp Spec) any {
		for _, p := range l.UnitProperties(sp) {
			if p.Name == "RuntimeMaxUSec" {
				return p.Value.Value()
			}
		}
		return nil
	}
	if got := runtimeMax(Spec{Unit: "u.service", JobDir: "/j", Stdin: r}); got != nil {
		t.Errorf("no limit, RuntimeMaxUSec = %v", got)
	}
	if got := runtimeMax(Spec{Unit: "u.service", JobDir: "/j", Stdin: r, Timeout: 2 * time.Second}); got != uint64(10_000_000) {
		t.Errorf("2 s limit, RuntimeMaxUSec = %v, want 10000000", got)
	}
}

// TestUnitPriorityFromPolicy: a unit gets the owner's Nice= (nice 0
// included: it is a choice) and CPUWeight=; without a policy it gets Nice=19,
// the jobs' default, and no CPUWeight=, so that is the manager's.
func TestUnitPriorityFromPolicy(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	l := &Launcher{Exe: "/bin/commandcore"}
	props := func(res jobresources.Caps) map[string]any {
		m := map[string]any{}
		for _, p := range l.UnitProperties(Spec{Unit: "u.service", JobDir: "/j", Stdin: r, Resources: res}) {
			m[p.Name] = p.Value.Value()
		}
		return m
	}
	if p := props(jobresources.Caps{}); p["Nice"] != int32(19) || p["CPUWeight"] != nil {
		t.Errorf("no policy: Nice=%v CPUWeight=%v", p["Nice"], p["CPUWeight"])
	}
	ten, zero := 10, 0
	if p := props(jobresources.Caps{Nice: &ten, CPUWeight: 50}); p["Nice"] != int32(10) || p["CPUWeight"] != uint64(50) {
		t.Errorf("nice 10, cpu_weight 50: Nice=%#v CPUWeight=%#v", p["Nice"], p["CPUWeight"])
	}
	if p := props(jobresources.Caps{Nice: &zero}); p["Nice"] != int32(0) || p["CPUWeight"] != nil {
		t.Errorf("nice 0: Nice=%#v CPUWeight=%#v", p["Nice"], p["CPUWeight"])
	}
}

// TestStartNicedLeavesTheAgentAlone: the fallback's child runs at the
// policy's niceness, and no thread of the starting process keeps it.
func TestStartNicedLeavesTheAgentAlone(t *testing.T) {
	base := threadNiceness(t)[strconv.Itoa(os.Getpid())]
	if base > 10 {
		t.Skipf("the test runs at niceness %d already", base)
	}
	for _, want := range []int{0, 10, 19} {
		var out bytes.Buffer
		cmd := exec.Command("/bin/sh", "-c", "cut -d' ' -f19 /proc/self/stat")
		cmd.Stdout = &out
		if err := startNiced(cmd, want); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		// Lowering never raises priority: a child of an agent nicer than
		// the policy runs at the agent's niceness.
		if got := strings.TrimSpace(out.String()); got != strconv.Itoa(max(want, base)) {
			t.Errorf("nice %d: the child runs at niceness %s", want, got)
		}
	}
	// The niced thread exits after the start returned; then no thread may
	// be niced.
	testkit.Eventually(t, 5*time.Second, func() error {
		niced := map[string]int{}
		for tid, n := range threadNiceness(t) {
			if n != base {
				niced[tid] = n
			}
		}
		if len(niced) != 0 {
			return fmt.Errorf("threads of the starting process stay niced: %v", niced)
		}
		return nil
	})
}

// threadNiceness is field 19 of /proc/self/task/*/stat, by thread ID.
func threadNiceness(t *testing.T) map[string]int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, task := range tasks {
		data, err := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
		if err != nil {
			continue // the thread ended
		}
		// Fields after the parenthesised command, which may hold spaces:
		// field 3 (state) is the first, so 19 (nice) is the 17th.
		f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		n, err := strconv.Atoi(f[16])
		if err != nil {
			t.Fatal(err)
		}
		m[task.Name()] = n
	}
	return m
}

// TestBusSocketPath: the socket whose replacement is watched is the one
// godbus dials: the address's unix path (unescaped), else
// $XDG_RUNTIME_DIR/bus; none for an abstract socket or another transport.
func TestBusSocketPath(t *testing.T) {
	for _, c := range []struct{ addr, runtime, want string }{
		{"unix:path=/run/user/1000/bus", "/x", "/run/user/1000/bus"},
		{"unix:path=/tmp/a%20b,guid=0123", "", "/tmp/a b"},
		{"unix:guid=0123,path=/p;unix:path=/q", "", "/p"},
		{"", "/run/user/7", "/run/user/7/bus"},
		{"autolaunch:", "/run/user/7", "/run/user/7/bus"},
		{"unix:abstract=/tmp/dbus-x", "/run/user/7", ""},
		{"tcp:host=localhost,port=1", "", ""},
		{"unix:path=/bad%zz", "", ""},
		{"", "", ""},
	} {
		t.Setenv("DBUS_SESSION_BUS_ADDRESS", c.addr)
		t.Setenv("XDG_RUNTIME_DIR", c.runtime)
		if got := busSocketPath(); got != c.want {
			t.Errorf("address %q runtime %q: %q, want %q", c.addr, c.runtime, got, c.want)
		}
	}
}

// TestRefusedIsAnAnswer: only the manager's own error reply means a unit
// was not started; no reply at all, or the bus's word that the manager
// went away with the request, may hide a unit that runs.
func TestRefusedIsAnAnswer(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{dbus.Error{Name: "org.freedesktop.systemd1.UnitExists"}, true},
		{fmt.Errorf("start: %w", dbus.Error{Name: "org.freedesktop.DBus.Error.InvalidArgs"}), true},
		{&dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied"}, true},
		{dbus.Error{Name: "org.freedesktop.DBus.Error.NoReply"}, false},
		{dbus.Error{Name: "org.freedesktop.DBus.Error.Disconnected"}, false},
		{dbus.ErrClosed, false},
		{context.DeadlineExceeded, false},
	} {
		if got := refused(c.err); got != c.want {
			t.Errorf("refused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestBusSocketTakenOverIsNoticed: when another bus takes over the user bus
// socket while the launcher's manager lives on (a second `systemd --user`
// booted on the same runtime directory), the launcher abandons its
// connection, says why, and goes to whatever now answers on the socket;
// once a manager answers there again it is reachable again. The socket
// taken over is the test's own path to the manager's bus (a link to it,
// named by DBUS_SESSION_BUS_ADDRESS), so other tests keep theirs.
func TestBusSocketTakenOverIsNoticed(t *testing.T) {
	if _, err := systemdtest.Ensure(); err != nil {
		t.Fatal(err)
	}
	busPath := busSocketPath()
	if busPath == "" {
		t.Fatal("the environment names no user bus socket")
	}
	sock := filepath.Join(t.TempDir(), "bus")
	if err := os.Symlink(busPath, sock); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path="+sock)
	var changes []ManagerChange
	l := &Launcher{Procs: procid.Default(), ConnectTimeout: 500 * time.Millisecond, OnManagerChange: func(c ManagerChange) { changes = append(changes, c) }}
	defer l.Close()
	if _, err := l.Bus(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Bus(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(changes) != "[{ true}]" {
		t.Fatalf("first connection reported %v", changes)
	}

	if err := os.Rename(sock, sock+".aside"); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			os.Remove(sock)
			if err := os.Rename(sock+".aside", sock); err != nil {
				t.Error(err)
			}
		}
	}
	defer restore()
	// The taker accepts and never answers.
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := l.Bus(context.Background()); err == nil {
		t.Fatal("the launcher kept talking to a manager whose bus socket another bus took over")
	}
	ln.Close()
	restore()
	if _, err := l.Bus(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(changes) != "[{ true} {bus_replaced false} { true}]" {
		t.Fatalf("reported %v", changes)
	}
}

// TestThrowawayUnitLeavesNothingLoaded: the hiding probe's throw-away unit
// is gone afterwards whether it succeeded, failed (a failed unit stays
// loaded until reset) or outlived its deadline.
func TestThrowawayUnitLeavesNothingLoaded(t *testing.T) {
	if _, err := systemdtest.Ensure(); err != nil {
		t.Fatal(err)
	}
	l := New("", false)
	defer l.Close()
	for _, c := range []struct {
		name    string
		argv    []string
		timeout time.Duration
		want    bool
	}{
		{"succeeds", []string{"/bin/true"}, 10 * time.Second, true},
		{"fails", []string{"/bin/false"}, 10 * time.Second, false},
		{"outlives its deadline", []string{"/bin/sleep", "60"}, 300 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			unit := fmt.Sprintf("commandcore-probe-test-%d.service", time.Now().UnixNano())
			t.Cleanup(func() {
				exec.Command("systemctl", "--user", "stop", unit).Run()
				exec.Command("systemctl", "--user", "reset-failed", unit).Run()
			})
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			props := []sdbus.Property{sdbus.PropType("oneshot"), sdbus.PropExecStart(c.argv, false)}
			if got := l.runThrowaway(ctx, unit, props); got != c.want {
				t.Fatalf("runThrowaway = %v, want %v", got, c.want)
			}
			if s := systemdtest.LoadState(t, unit); s != "not-found" {
				t.Fatalf("the throw-away unit is left %s", s)
			}
		})
	}
}

// TestMain: the test binary doubles as a supervisor that only sends READY
// (`EXE supervise DIR`) and lives a moment, and as the hide-exec role.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == roles.HideExec {
		os.Exit(hideexec.Main(os.Args[2:], os.Stderr))
	}
	if len(os.Args) == 3 && os.Args[1] == "supervise" {
		systemdtest.RedirectNotify(os.Args[2])
		daemon.SdNotify(false, daemon.SdNotifyReady)
		time.Sleep(time.Second)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestMissedReadyIsNotAwaitedAgain: once a launch missed its READY (its
// unit's READY sent to a socket not the manager's), later launches on
// that manager are not told to wait for READY, and are again once a READY
// arrives.
func TestMissedReadyIsNotAwaitedAgain(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l := New(exe, false)
	defer l.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	// astray, when set, is where each unit started sends its READY.
	var astray *systemdtest.AstrayNotify
	start := func() *Started {
		t.Helper()
		unit := UnitName("00000000-0000-4000-8000-0000000000ff", uuid.NewString())
		dir := t.TempDir()
		if astray != nil {
			astray.RedirectTo(t, dir)
		}
		s, err := l.Start(context.Background(), "systemd_unit", Spec{Unit: unit, JobDir: dir, Stdin: null})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop(context.Background()) })
		return s
	}
	arrives := func(s *Started) bool {
		select {
		case <-s.Ready:
			return true
		case <-time.After(2 * time.Second):
			return false
		}
	}

	if s := start(); s.Ready == nil || !arrives(s) {
		t.Fatal("READY of a manager that has its notify socket did not arrive")
	}
	astray = systemdtest.NewAstrayNotify(t)
	missed := start()
	if missed.Ready == nil || arrives(missed) {
		t.Fatal("a launch whose READY goes astray was not told to wait, or got READY")
	}
	if astray.Astray() == 0 {
		t.Fatal("no READY reached the other socket; the unit's did not go astray")
	}
	missed.MissedReady()
	if s := start(); s.Ready != nil {
		t.Fatal("after a missed READY the next launch is still told to wait for one")
	}
	astray = nil
	// The first launch after is not told to wait either; its READY, which
	// arrives, is noticed.
	first := start()
	testkit.Eventually(t, 10*time.Second, func() error {
		if first.bus.readyAstray.Load() {
			return errors.New("READY arrives again, yet the launcher did not notice")
		}
		return nil
	})
	if s := start(); s.Ready == nil {
		t.Fatal("READY arrives again, yet launches are still not told to wait for it")
	}
}
