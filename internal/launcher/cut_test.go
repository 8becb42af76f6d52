package launcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/commandcore/commandcore/internal/hideexec"
	"github.com/commandcore/commandcore/internal/systemdtest"
)

// TestManagerSockets: the sockets a cut covers are the bus wherever the
// address puts it and the runtime directory's bus and private socket,
// each once; an address no mount covers (abstract, TCP), even as a
// second choice, makes a cut impossible.
func TestManagerSockets(t *testing.T) {
	run := fmt.Sprintf("/run/user/%d", os.Getuid())
	for _, c := range []struct {
		addr, runtime string
		want          []string
		ok            bool
	}{
		{"unix:path=/tmp/b", "/x", []string{"/tmp/b", "/x/bus", "/x/systemd/private", run + "/bus", run + "/systemd/private"}, true},
		{"unix:path=/x/bus", "/x", []string{"/x/bus", "/x/systemd/private", run + "/bus", run + "/systemd/private"}, true},
		{"", "", []string{run + "/bus", run + "/systemd/private"}, true},
		{"autolaunch:", "", []string{run + "/bus", run + "/systemd/private"}, true},
		{"unix:path=/a;", "", []string{"/a", run + "/bus", run + "/systemd/private"}, true},
		{"unix:abstract=/tmp/dbus-x", "/x", nil, false},
		{"unix:path=/a;unix:abstract=/tmp/dbus-x", "", nil, false},
		{"tcp:host=localhost,port=1", "", nil, false},
	} {
		t.Setenv("DBUS_SESSION_BUS_ADDRESS", c.addr)
		t.Setenv("XDG_RUNTIME_DIR", c.runtime)
		got, ok := ManagerSockets()
		if ok != c.ok || (c.ok && !slices.Equal(got, c.want)) {
			t.Errorf("address %q runtime %q: %q %v, want %q %v", c.addr, c.runtime, got, ok, c.want, c.ok)
		}
	}
}

// TestUnitPropertiesCutOffTheUserManager: a cut-off job's unit runs in a
// user namespace of its own with each of the manager's sockets that
// exists covered by /dev/null, and a unit that is not cut off has
// neither.
func TestUnitPropertiesCutOffTheUserManager(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	runtime, elsewhere := t.TempDir(), t.TempDir()
	for _, f := range []string{filepath.Join(runtime, "bus"), filepath.Join(elsewhere, "bus")} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// No systemd/private here: a bind over it would create it.
	t.Setenv("XDG_RUNTIME_DIR", runtime)
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path="+filepath.Join(elsewhere, "bus"))
	l := &Launcher{Exe: "/bin/commandcore", Cut: &Hidden{State: "/s", Config: "/c"}}
	props := func(cut bool) map[string]any {
		m := map[string]any{}
		for _, p := range l.UnitProperties(Spec{Unit: "u.service", JobDir: "/j", Stdin: r, CutOff: cut}) {
			m[p.Name] = p.Value.Value()
		}
		return m
	}
	if p := props(false); p["PrivateUsers"] != nil || p["BindReadOnlyPaths"] != nil || p["TemporaryFileSystem"] != nil {
		t.Fatalf("a unit not cut off, where the user manager cannot hide directories: PrivateUsers=%v BindReadOnlyPaths=%v TemporaryFileSystem=%v",
			p["PrivateUsers"], p["BindReadOnlyPaths"], p["TemporaryFileSystem"])
	}
	p := props(true)
	if p["PrivateUsers"] != true {
		t.Errorf("a cut-off unit: PrivateUsers=%v", p["PrivateUsers"])
	}
	// The cut hides the agent's directories too, in the unit's own user
	// namespace, whatever the plain units get.
	if got := fmt.Sprint(p["TemporaryFileSystem"], p["BindPaths"]); got != "[{/s ro} {/c ro}] [{/j /j false 0}]" {
		t.Errorf("a cut-off unit: TemporaryFileSystem, BindPaths = %s", got)
	}
	binds, _ := p["BindReadOnlyPaths"].([]bindPath)
	var covered []string
	for _, b := range binds {
		if b.Source != "/dev/null" {
			t.Errorf("%s is covered by %s", b.Dest, b.Source)
		}
		// The real /run/user/UID may hold the test manager's sockets too.
		if !strings.HasPrefix(b.Dest, fmt.Sprintf("/run/user/%d/", os.Getuid())) {
			covered = append(covered, b.Dest)
		}
	}
	if want := []string{filepath.Join(elsewhere, "bus"), filepath.Join(runtime, "bus")}; !slices.Equal(covered, want) {
		t.Errorf("covered %q, want %q", covered, want)
	}
}

// probedHider is a Hider for this test binary's own role, probed with
// the user manager's configuration to keep read-only when cut when
// manager is set.
func probedHider(t *testing.T, manager bool) *hideexec.Hider {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := hideexec.Covers{}
	if manager {
		c.CutReadOnly = []string{t.TempDir()}
	}
	h := hideexec.Probe(context.Background(), exe, t.TempDir(), t.TempDir(), c)
	if h == nil {
		t.Skip("this host refuses the hide-exec role a mount namespace")
	}
	return h
}

// TestCanCutOffOnlyWhereProbed: a unit is cut off only where the probe
// found it works, a fallback job only through the hide-exec role where
// its probe kept the user manager's configuration read-only, and neither
// while the bus is at an abstract address.
func TestCanCutOffOnlyWhereProbed(t *testing.T) {
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")
	l := &Launcher{}
	if l.CanCutOff("systemd_unit") || l.CanCutOff("shared_parent_cgroup") {
		t.Fatal("cut off without a probe")
	}
	l.FallbackHide = probedHider(t, false)
	if l.CanCutOff("shared_parent_cgroup") {
		t.Fatal("a fallback job cut off by a role that keeps nothing of the manager's read-only")
	}
	l.Cut, l.FallbackHide = &Hidden{State: "/s", Config: "/c"}, probedHider(t, true)
	if !l.CanCutOff("systemd_unit") || !l.CanCutOff("shared_parent_cgroup") {
		t.Fatal("not cut off after the probes")
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:abstract=/tmp/dbus-x")
	if l.CanCutOff("systemd_unit") || l.CanCutOff("shared_parent_cgroup") {
		t.Fatal("cut off from a bus at an abstract address")
	}
}

// TestCutUnitReachesNoManager, against the real user manager: where the
// probe says units can be cut off, a unit with a cut-off job's properties
// reaches the manager neither over the bus nor over its private socket,
// while a unit without them does, and the probe leaves nothing behind.
func TestCutUnitReachesNoManager(t *testing.T) {
	m, err := systemdtest.Ensure()
	if err != nil {
		t.Fatal(err)
	}
	state, config := t.TempDir(), t.TempDir()
	l := New("", false)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cut := l.ProbeCut(ctx, Hidden{State: state, Config: config})
	for _, d := range []string{state, config} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("%s holds %v after the probe", d, ents)
		}
	}
	if !cut {
		t.Skip("this user manager cannot cut a unit off")
	}
	l.Cut = &Hidden{State: state, Config: config}
	job := filepath.Join(state, "job")
	if err := os.Mkdir(job, 0o700); err != nil {
		t.Fatal(err)
	}
	env := sdbus.Property{Name: "Environment", Value: dbus.MakeVariant([]string{"DBUS_SESSION_BUS_ADDRESS=" + m.BusAddress(), "XDG_RUNTIME_DIR=" + m.RuntimeDir()})}
	// ok reports whether script ran in such a unit and succeeded.
	ok := func(cutOff bool, script string) bool {
		unit := fmt.Sprintf("commandcore-probe-test-%d.service", time.Now().UnixNano())
		props := append([]sdbus.Property{sdbus.PropType("oneshot"), env,
			sdbus.PropExecStart([]string{"/bin/sh", "-c", script}, false)}, l.confinement(job, cutOff)...)
		return l.runThrowaway(ctx, unit, props)
	}
	const bus, private = "busctl --user status >/dev/null", "systemctl --user show-environment >/dev/null"
	if !ok(false, bus+" && "+private) {
		t.Fatal("a unit that is not cut off does not reach the user manager")
	}
	if !ok(true, "! "+bus+" && ! "+private) {
		t.Fatal("a cut-off unit reaches the user manager, or does not run")
	}
}
