package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/hideexec"
	"github.com/commandcore/commandcore/internal/jobmeta"
)

// ManagerSockets returns the sockets through which a process of the
// agent's user reaches its user manager: the user bus, wherever
// DBUS_SESSION_BUS_ADDRESS puts it and at $XDG_RUNTIME_DIR/bus, and the
// manager's private socket, $XDG_RUNTIME_DIR/systemd/private (systemctl's
// first choice), each also under /run/user/UID, where systemd makes them.
// The user bus listens on that socket file only (the manager hands
// dbus-daemon that one socket), so a job naming another address finds
// nothing there. ok is false when the agent's bus address names something
// no mount covers (an abstract socket, TCP): no job could be cut off
// that bus.
func ManagerSockets() (paths []string, ok bool) {
	ok = true
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	if addr := os.Getenv("DBUS_SESSION_BUS_ADDRESS"); addr != "" && addr != "autolaunch:" {
		for _, p := range busAddressPaths(addr) {
			ok = ok && p != ""
			add(p)
		}
	}
	for _, dir := range []string{os.Getenv("XDG_RUNTIME_DIR"), fmt.Sprintf("/run/user/%d", os.Getuid())} {
		if dir != "" {
			add(filepath.Join(dir, "bus"))
			add(filepath.Join(dir, "systemd", "private"))
		}
	}
	return paths, ok
}

// presentSockets returns the paths that exist now: a unit's bind mount
// over a missing path would have systemd create it on the host.
func presentSockets(paths []string) []string {
	var out []string
	for _, p := range paths {
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			out = append(out, p)
		}
	}
	return out
}

// cutProperties keep a job unit off the user manager, with its sockets
// covered by /dev/null, which refuses a connection (hideProperties), and
// its configuration read-only (Hidden.ReadOnly). And the unit runs in a
// user namespace of its own (PrivateUsers=): the kernel then refuses its
// processes the /proc/PID/root of every process outside it, which leads to
// the sockets around the cover, and no process inside holds the power to
// unmount the cover. A bind of /dev/null rather than InaccessiblePaths=,
// which fails every unit of these test machines' user manager (status 226)
// while it binds paths.
func cutProperties() []sdbus.Property {
	return []sdbus.Property{{Name: "PrivateUsers", Value: dbus.MakeVariant(true)}}
}

// CanCutOff reports whether a job of domain can start cut off from the
// user manager: a unit where ProbeCut found that works, a fallback
// supervisor through FallbackHide where its probe did
// (hideexec.Hider.CanCut); neither while the user bus is at an address no
// mount covers.
func (l *Launcher) CanCutOff(domain string) bool {
	if _, ok := ManagerSockets(); !ok {
		return false
	}
	if domain == jobmeta.DomainSystemdUnit {
		return l.Cut != nil
	}
	return l.FallbackHide != nil && l.FallbackHide.CanCut()
}

// ProbeCut reports whether the user manager starts a unit cut off from
// itself as a cut-off job's is, the agent's directories h.State and
// h.Config hidden and h.ReadOnly read-only, and whether inside it the
// manager's sockets really are out of reach, the agent's directories
// hidden, h.ReadOnly not writable and a directory bound back in writable.
// The directories are part of it: a job that could write the agent's
// permissions.json would lift its own cut, and one that could write the
// manager's unit files or the agent's binary would leave behind what runs
// outside the cut later. In the unit's user namespace an unprivileged user
// manager may hide them where ProbeHiding found it cannot. Where it works,
// cut-off job units from then on get the same properties (Cut). The probe
// leaves nothing behind but the read-only directories it made
// (ensureDirs).
func (l *Launcher) ProbeCut(ctx context.Context, h Hidden) bool {
	sockets, ok := ManagerSockets()
	if !ok {
		return false
	}
	if _, err := l.Bus(ctx); err != nil {
		return false
	}
	m, err := hideexec.NewMarkers(h.State, h.Config)
	if err != nil {
		return false
	}
	defer m.Remove()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	tag := make([]byte, 8)
	rand.Read(tag)
	unit := "commandcore-probe-" + hex.EncodeToString(tag) + ".service"
	props := append([]sdbus.Property{
		sdbus.PropDescription("CommandCore isolation probe"),
		sdbus.PropType("oneshot"),
		sdbus.PropExecStart(append([]string{"/bin/sh"}, m.Argv(h.ReadOnly, sockets)...), false),
	}, cutConfinement(h, m.Bound)...)
	if !l.runThrowaway(ctx, unit, props) {
		return false
	}
	return m.OK()
}

// confinement is what keeps a job unit whose directory is jobDir out of
// the agent's directories and, when cut, off the user manager.
func (l *Launcher) confinement(jobDir string, cut bool) []sdbus.Property {
	switch {
	case cut:
		return cutConfinement(*l.Cut, jobDir)
	case l.Hide != nil:
		return hideProperties(*l.Hide, jobDir, nil)
	}
	return nil
}

// cutConfinement is a cut-off job unit's: the agent's directories h
// hidden but for jobDir, h.ReadOnly read-only, and the manager's sockets
// covered, in a user namespace of the unit's own.
func cutConfinement(h Hidden, jobDir string) []sdbus.Property {
	sockets, _ := ManagerSockets()
	ensureDirs(h.ReadOnly)
	return append(hideProperties(h, jobDir, presentSockets(sockets)), cutProperties()...)
}

// ensureDirs makes each of dirs that is missing: the user manager would
// refuse a unit that binds a missing path, and a job could make it. A
// directory that cannot be made fails the unit, not the cut.
func ensureDirs(dirs []string) {
	for _, d := range dirs {
		os.MkdirAll(d, 0o755)
	}
}
