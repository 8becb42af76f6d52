package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/hideexec"
	"github.com/commandcore/commandcore/internal/launcher"
	"github.com/commandcore/commandcore/internal/roles"
	"github.com/commandcore/commandcore/internal/statedir"
	"github.com/commandcore/commandcore/internal/status"
	"github.com/commandcore/commandcore/internal/systemdtest"
	"github.com/commandcore/commandcore/internal/testkit"
)

func TestMain(m *testing.M) {
	// The test binary is the agent's executable, which its start-up probe
	// re-executes as the hide-exec role.
	if len(os.Args) > 1 && os.Args[1] == roles.HideExec {
		os.Exit(hideexec.Main(os.Args[2:], os.Stderr))
	}
	systemdtest.Main(m)
}

// TestRunRecordsItselfUntilStopped: an agent that is not enrolled records
// itself for status, refreshes the record on every tick, and on stop
// returns cleanly with its start and stop journalled.
func TestRunRecordsItselfUntilStopped(t *testing.T) {
	state, config := t.TempDir(), t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{StateDir: state, ConfigDir: config, Exe: exe, ReconcileEvery: 20 * time.Millisecond})
	}()

	var rt *status.Runtime
	testkit.Eventually(t, 10*time.Second, func() error {
		data, err := os.ReadFile(filepath.Join(state, status.RuntimeFile))
		if err == nil {
			rt, err = status.DecodeRuntime(data)
		}
		if err == nil && !rt.Connection.ObservedAt.After(rt.StartedAt) {
			err = fmt.Errorf("connection observed at %v, agent started at %v", rt.Connection.ObservedAt, rt.StartedAt)
		}
		if err != nil {
			return fmt.Errorf("no runtime record refreshed by a tick (last: %v)", err)
		}
		return nil
	})
	// This test is no systemd service, whatever unit name it could claim.
	if rt.PID != os.Getpid() || rt.Service != "" {
		t.Fatalf("record names pid %d, service %q; want this process (%d) and no service", rt.PID, rt.Service, os.Getpid())
	}
	// The harness's user manager is what this agent sees, and records.
	if sd := rt.Systemd; sd == nil || sd.UserManager != status.ManagerReachable || sd.FailureDomain != "systemd_unit" || sd.ObservedAt.Before(rt.StartedAt) {
		t.Fatalf("systemd = %+v, want the user manager reachable and systemd_unit jobs, observed since the start", rt.Systemd)
	}
	// Root can always make the mount namespace that hides the agent's
	// directories from process.run.
	if os.Geteuid() == 0 && !rt.RunDirsHidden {
		t.Fatal("the record says process.run cannot be hidden, for root")
	}
	if rt.Connection.State != status.ConnNotEnrolled || rt.Connection.Server != "" {
		t.Fatalf("connection = %+v, want not_enrolled with no server", rt.Connection)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v after stop, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of stop")
	}
	if rt, err := status.ReadRuntime(state); err != nil || rt.StoppedAt == nil || rt.PID != os.Getpid() {
		t.Fatalf("record after a clean stop: %+v %v, want this agent's, marked stopped", rt, err)
	}
	r, err := activity.OpenReader(statedir.JournalPath(state))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	evs, err := r.Last(10, false)
	var kinds []activity.Kind
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	if err != nil || len(kinds) != 2 || kinds[0] != activity.KindAgentStart || kinds[1] != activity.KindAgentStop {
		t.Fatalf("journal = %v (%v), want [agent_start agent_stop]", kinds, err)
	}
}

// TestRecordSaysWhereProcessRunCannotBeHidden simulates a host that
// refuses the namespaces with an executable that fails as the hide-exec
// role (/bin/false): the agent starts all the same and records that
// process.run commands are not hidden, which status then shows.
func TestRecordSaysWhereProcessRunCannotBeHidden(t *testing.T) {
	state, config := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{StateDir: state, ConfigDir: config, Exe: "/bin/false", ReconcileEvery: 20 * time.Millisecond})
	}()
	var rt *status.Runtime
	testkit.Eventually(t, 10*time.Second, func() error {
		data, err := os.ReadFile(filepath.Join(state, status.RuntimeFile))
		if err == nil {
			rt, err = status.DecodeRuntime(data)
		}
		if err != nil {
			return fmt.Errorf("no runtime record (last: %v)", err)
		}
		return nil
	})
	if rt.RunDirsHidden {
		t.Fatal("the record says process.run is hidden, though the role cannot run")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v after stop, want nil", err)
	}
}

// TestTickReleasesFinishedJobsUnits: a failed unit of one of the agent's
// jobs that nothing is left to read from (the job is no longer in the
// store) is reset by the agent's tick, with no client asking.
func TestTickReleasesFinishedJobsUnits(t *testing.T) {
	state, config := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{StateDir: state, ConfigDir: config, Exe: "/bin/false", ReconcileEvery: 20 * time.Millisecond})
	}()
	defer func() { cancel(); <-done }()
	var device string
	testkit.Eventually(t, 10*time.Second, func() error {
		if _, err := status.ReadRuntime(state); err != nil {
			return fmt.Errorf("the agent recorded no runtime record (last: %v)", err)
		}
		if device, _ = statedir.ExistingLocalDeviceID(state); device == "" {
			return errors.New("the agent recorded a runtime record, but no local device ID")
		}
		return nil
	})
	unit := launcher.UnitName(device, uuid.NewString())
	t.Cleanup(func() { exec.Command("systemctl", "--user", "reset-failed", unit).Run() })
	if out, err := exec.Command("systemd-run", "--user", "--quiet", "--unit="+unit, "/bin/false").CombinedOutput(); err != nil {
		t.Fatalf("systemd-run: %v %s", err, out)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		out, err := exec.Command("systemctl", "--user", "show", "-p", "LoadState", "--value", unit).Output()
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.TrimSpace(string(out)); s != "not-found" {
			return fmt.Errorf("the failed unit is still %s", s)
		}
		return nil
	})
}
