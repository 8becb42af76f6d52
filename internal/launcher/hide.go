package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/hideexec"
)

// probeTimeout bounds the throw-away unit that finds out whether the user
// manager can hide directories from a job.
const probeTimeout = 5 * time.Second

// Hidden are the agent's own directories that job units cannot reach, and
// the directories they see read-only.
type Hidden struct {
	State, Config string
	// ReadOnly are directories a job sees read-only: the directory of the
	// agent's binary, and for a job cut off from the user manager the
	// manager's configuration (ManagerConfig).
	ReadOnly []string
}

// hideProperties hides the agent's directories from a job: each is covered
// by an empty read-only tmpfs, and the job's own directory is bound back
// into the state directory's, so the supervisor still reaches its own
// files and nothing else of the agent's. TemporaryFileSystem= rather than
// InaccessiblePaths=: a mount point for the job directory can be made in
// the tmpfs, not in an inaccessible inode, and a user manager without
// privileges (as on the test machines, measured) can mount a tmpfs in its
// units' namespaces where it fails every unit with InaccessiblePaths=
// (status 226/NAMESPACE).
//
// Each of h.ReadOnly is bound read-only over itself, and each directory on
// the way to it that the agent's user could rename over itself
// (hideexec.Pins): a mount point can be neither renamed nor removed
// (EBUSY), so no job puts another directory in its place. The directory
// rather than the files in it: a file bound over itself can be neither
// written, renamed over nor removed either, but a rename over it outside
// the job (an update putting a new binary in place) drops the bind in
// every job that runs on, while a directory's bind shows the new file,
// read-only. Sockets, when given, are covered by /dev/null (a cut).
func hideProperties(h Hidden, jobDir string, sockets []string) []sdbus.Property {
	type tmpfs struct{ Path, Options string }
	binds := []bindPath{{Source: jobDir, Dest: jobDir}}
	for _, p := range hideexec.Pins(h.ReadOnly) {
		// Recursive, so that nothing mounted beneath is dropped.
		binds = append(binds, bindPath{Source: p, Dest: p, Flags: unix.MS_REC})
	}
	var readOnly []bindPath
	for _, d := range h.ReadOnly {
		readOnly = append(readOnly, bindPath{Source: d, Dest: d, Flags: unix.MS_REC})
	}
	for _, s := range sockets {
		readOnly = append(readOnly, bindPath{Source: os.DevNull, Dest: s})
	}
	props := []sdbus.Property{
		{Name: "TemporaryFileSystem", Value: dbus.MakeVariant([]tmpfs{{Path: h.State, Options: "ro"}, {Path: h.Config, Options: "ro"}})},
		{Name: "BindPaths", Value: dbus.MakeVariant(binds)},
	}
	if len(readOnly) > 0 {
		props = append(props, sdbus.Property{Name: "BindReadOnlyPaths", Value: dbus.MakeVariant(readOnly)})
	}
	return props
}

// bindPath is one entry of BindPaths= or BindReadOnlyPaths= on the bus.
type bindPath struct {
	Source, Dest string
	IgnoreENOENT bool
	Flags        uint64
}

// ProbeHiding reports whether the user manager can start a unit with the
// agent's directories h.State and h.Config hidden as a job's are (see
// hideProperties), a directory inside h.State bound back in and h.ReadOnly
// read-only, and whether inside it they really are hidden, the bound
// directory writable and the others not. Where it can (a manager with
// working mount namespaces), job units from then on get the same
// properties (README); where it cannot, a unit with them would never
// start, so jobs run without. The probe leaves nothing behind.
func (l *Launcher) ProbeHiding(ctx context.Context, h Hidden) bool {
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
		sdbus.PropExecStart(append([]string{"/bin/sh"}, m.Argv(h.ReadOnly, nil)...), false),
	}, hideProperties(h, m.Bound, nil)...)
	if !l.runThrowaway(ctx, unit, props) {
		return false
	}
	return m.OK()
}

// runThrowaway runs a throw-away unit to its end within ctx and reports
// whether it succeeded. It leaves nothing loaded: a unit that failed is
// reset once its result is in, and one still running at ctx's end is
// stopped and reset as an abandoned launch's unit is.
func (l *Launcher) runThrowaway(ctx context.Context, unit string, props []sdbus.Property) bool {
	conn, err := l.Bus(ctx)
	if err != nil {
		return false
	}
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, unit, "fail", props, done); err != nil {
		return false
	}
	select {
	case res := <-done:
		if res == "done" {
			return true
		}
		// A failed unit stays loaded until reset.
		conn.ResetFailedUnitContext(context.WithoutCancel(ctx), unit)
		return false
	case <-ctx.Done():
		l.stopUnit(context.WithoutCancel(ctx), unit)
		return false
	}
}
