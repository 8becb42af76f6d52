package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/commandcore/commandcore/internal/hideexec"
)

// probeTimeout bounds the throw-away unit that finds out whether the user
// manager can hide directories from a job.
const probeTimeout = 5 * time.Second

// Hidden are the agent's own directories that job units cannot reach.
type Hidden struct {
	State, Config string
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
func hideProperties(h Hidden, jobDir string) []sdbus.Property {
	type tmpfs struct{ Path, Options string }
	return []sdbus.Property{
		{Name: "TemporaryFileSystem", Value: dbus.MakeVariant([]tmpfs{{Path: h.State, Options: "ro"}, {Path: h.Config, Options: "ro"}})},
		{Name: "BindPaths", Value: dbus.MakeVariant([]bindPath{{Source: jobDir, Dest: jobDir}})},
	}
}

// bindPath is one entry of BindPaths= or BindReadOnlyPaths= on the bus.
type bindPath struct {
	Source, Dest string
	IgnoreENOENT bool
	Flags        uint64
}

// ProbeHiding reports whether the user manager can start a unit with the
// agent's directories stateDir and configDir hidden as a job's are (see
// hideProperties) and a directory inside stateDir bound back in, and
// whether inside it they really are hidden and the bound directory
// writable. Where it can (a manager with working mount namespaces), job
// units from then on get the same properties (README); where it cannot,
// a unit with them would never start, so jobs run
// without. The probe leaves nothing behind.
func (l *Launcher) ProbeHiding(ctx context.Context, stateDir, configDir string) bool {
	if _, err := l.Bus(ctx); err != nil {
		return false
	}
	m, err := hideexec.NewMarkers(stateDir, configDir)
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
		sdbus.PropExecStart(append([]string{"/bin/sh"}, m.Argv()...), false),
	}, hideProperties(Hidden{State: stateDir, Config: configDir}, m.Bound)...)
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
