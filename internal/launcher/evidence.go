package launcher

import (
	"context"
	"errors"
	"fmt"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/reconcile"
)

// UnitEvidence returns what systemd retained about a job's unit: its Result
// and InvocationID, or nil when the unit is not loaded (a unit whose main
// process exited cleanly is garbage-collected at once).
func (l *Launcher) UnitEvidence(ctx context.Context, unit string) (*reconcile.UnitEvidence, error) {
	conn, err := l.Bus(ctx)
	if err != nil {
		return nil, err
	}
	props, err := conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return nil, fmt.Errorf("unit properties: %w", err)
	}
	if load, _ := props["LoadState"].(string); load != "loaded" {
		return nil, nil
	}
	inv := invocationID(props["InvocationID"])
	switch active, _ := props["ActiveState"].(string); active {
	case "active", "activating", "deactivating", "reloading":
		return &reconcile.UnitEvidence{InvocationID: inv, Settling: true}, nil
	}
	p, err := conn.GetUnitTypePropertyContext(ctx, unit, "Service", "Result")
	if err != nil {
		return nil, fmt.Errorf("unit result: %w", err)
	}
	result, _ := p.Value.Value().(string)
	return &reconcile.UnitEvidence{InvocationID: inv, Result: result}, nil
}

// ResetUnit clears a failed unit once its evidence has been recorded, so
// the user manager does not keep it loaded forever.
func (l *Launcher) ResetUnit(ctx context.Context, unit string) error {
	conn, err := l.Bus(ctx)
	if err != nil {
		return err
	}
	return conn.ResetFailedUnitContext(ctx, unit)
}

// FailedUnits returns the names of the failed units whose names start with
// prefix: one question to the user manager however many jobs there are.
func (l *Launcher) FailedUnits(ctx context.Context, prefix string) ([]string, error) {
	conn, err := l.Bus(ctx)
	if err != nil {
		return nil, err
	}
	units, err := conn.ListUnitsByPatternsContext(ctx, []string{"failed"}, []string{prefix + "*"})
	if err != nil {
		return nil, fmt.Errorf("list failed units: %w", err)
	}
	names := make([]string, len(units))
	for i, u := range units {
		names[i] = u.Name
	}
	return names, nil
}

// invocationID renders the InvocationID property (16 bytes) as systemd
// prints it: 32 lowercase hex digits, the form $INVOCATION_ID carries.
func invocationID(v any) string {
	b, ok := v.([]byte)
	if !ok || len(b) == 0 {
		return ""
	}
	return fmt.Sprintf("%x", b)
}

// ErrNotRunning is SignalMain's answer for a unit without a main process
// to signal: not loaded, or ended.
var ErrNotRunning = errors.New("the unit has no main process")

// SignalMain has the user manager send sig to the main process of unit,
// a job's supervisor: the process the manager started, whatever the job's
// files say of it.
func (l *Launcher) SignalMain(ctx context.Context, unit string, sig unix.Signal) error {
	conn, err := l.Bus(ctx)
	if err != nil {
		return err
	}
	err = conn.KillUnitWithTarget(ctx, unit, sdbus.Main, int32(sig))
	switch errorName(err) {
	case "org.freedesktop.systemd1.NoSuchUnit", "org.freedesktop.systemd1.NoSuchProcess":
		return ErrNotRunning
	}
	if err != nil {
		return fmt.Errorf("signal the unit's main process: %w", err)
	}
	return nil
}

// MainPID returns the PID of unit's main process, a job's supervisor, as
// the user manager knows it: ErrNotRunning when it has none.
func (l *Launcher) MainPID(ctx context.Context, unit string) (int, error) {
	conn, err := l.Bus(ctx)
	if err != nil {
		return 0, err
	}
	p, err := conn.GetServicePropertyContext(ctx, unit, "MainPID")
	if err != nil {
		return 0, fmt.Errorf("unit main pid: %w", err)
	}
	pid, _ := p.Value.Value().(uint32)
	if pid == 0 {
		return 0, ErrNotRunning
	}
	return int(pid), nil
}
