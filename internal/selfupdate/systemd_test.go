package selfupdate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/systemdtest"
	"github.com/commandcore/commandcore/internal/testkit"
)

func TestMain(m *testing.M) { systemdtest.Main(m) }

// TestWatchdogRunsApartFromTheCaller: the watchdog is a transient unit of
// the real user manager, running the given command line to its end and
// then collected.
func TestWatchdogRunsApartFromTheCaller(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "ran")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	unit, err := startWatchdog(ctx, []string{"/bin/sh", "-c", "echo $XDG_RUNTIME_DIR > " + mark})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(unit, WatchdogUnitPrefix) || !strings.HasSuffix(unit, ".service") {
		t.Errorf("unit %q", unit)
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		b, err := os.ReadFile(mark)
		if err != nil {
			return err
		}
		// It reaches the user manager as its caller does.
		if strings.TrimSpace(string(b)) != os.Getenv("XDG_RUNTIME_DIR") {
			t.Fatalf("the watchdog ran with XDG_RUNTIME_DIR %q", b)
		}
		return nil
	})
	testkit.Eventually(t, 20*time.Second, func() error {
		if s := systemdtest.LoadState(t, unit); s != "not-found" {
			return fmt.Errorf("the watchdog unit is %s after it ended", s)
		}
		return nil
	})
}

// A restart of a unit the manager does not know fails; the watchdog's
// restarts are of the agent's own unit.
func TestRestartOfAnUnknownUnitFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := restart(ctx, "commandcore-update-test-no-such.service", true); err == nil {
		t.Error("restarting a unit that does not exist succeeded")
	}
}

// apply runs an update of an installed "binary" (a script, so the
// watchdog unit runs it as the previous binary) to new content.
func apply(t *testing.T, installed string) (Update, error) {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "commandcore")
	if err := os.WriteFile(exe, []byte(installed), 0o755); err != nil {
		t.Fatal(err)
	}
	server, offer := serve(t, []byte("new"), []byte("new"))
	u := Update{Server: server, Offer: offer, Current: "1.1.0", Exe: exe, Service: "commandcore-update-test.service", StateDir: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return u, u.Apply(ctx)
}

// TestApplyStartsTheWatchdogFromThePreviousBinary: the new binary is in
// place, the previous one kept, the update recorded as started, and the
// watchdog unit runs the previous binary with what it needs to know.
func TestApplyStartsTheWatchdogFromThePreviousBinary(t *testing.T) {
	args := filepath.Join(t.TempDir(), "args")
	u, err := apply(t, "#!/bin/sh\necho \"$@\" > "+args+"\n")
	if err != nil {
		t.Fatal(err)
	}
	if read(t, u.Exe) != "new" || !strings.Contains(read(t, PreviousPath(u.Exe)), "#!/bin/sh") {
		t.Fatal("the binaries are not where an update puts them")
	}
	if r, err := ReadRecord(u.StateDir); err != nil || r == nil || r.State != StateStarted || r.From != "1.1.0" || r.To != "1.2.0" {
		t.Errorf("record %+v, %v", r, err)
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		b, err := os.ReadFile(args)
		if err != nil {
			return err
		}
		want := "update-watchdog --service commandcore-update-test.service --exe " + u.Exe + " --state-dir " + u.StateDir + " --from 1.1.0 --to 1.2.0"
		// The shell creates the file before it writes to it.
		if strings.TrimSpace(string(b)) != want {
			return fmt.Errorf("the watchdog ran with %q, want %q", b, want)
		}
		return nil
	})
}

// TestApplyWithoutAWatchdogPutsThePreviousBinaryBack: a watchdog that
// cannot start (here, a previous binary that cannot be run) means nothing
// would roll back a bad binary, so the update is undone at once.
func TestApplyWithoutAWatchdogPutsThePreviousBinaryBack(t *testing.T) {
	u, err := apply(t, "not a program")
	if err == nil {
		t.Fatal("an update without its watchdog went on")
	}
	if read(t, u.Exe) != "not a program" {
		t.Error("the previous binary is not back")
	}
	if r, _ := ReadRecord(u.StateDir); r == nil || r.State != StateRolledBack {
		t.Errorf("record %+v", r)
	}
}

// The user manager is reached with either of the two ways a session names
// it: DBUS_SESSION_BUS_ADDRESS alone, or XDG_RUNTIME_DIR alone (its bus
// socket); with neither, nothing is tried.
func TestTheUserManagerIsReachedEitherWay(t *testing.T) {
	bus, runtime := os.Getenv("DBUS_SESSION_BUS_ADDRESS"), os.Getenv("XDG_RUNTIME_DIR")
	if bus == "" || runtime == "" {
		t.Fatal("the test's user manager did not set both DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR")
	}
	for name, env := range map[string][2]string{
		"DBUS_SESSION_BUS_ADDRESS alone": {bus, ""},
		"XDG_RUNTIME_DIR alone":          {"", runtime},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("DBUS_SESSION_BUS_ADDRESS", env[0])
			t.Setenv("XDG_RUNTIME_DIR", env[1])
			mark := filepath.Join(t.TempDir(), "ran")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := startWatchdog(ctx, []string{"/bin/touch", mark}); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 20*time.Second, func() error {
				_, err := os.Stat(mark)
				return err
			})
		})
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := restart(ctx, "commandcore-update-test-no-such.service", true); err == nil || !strings.Contains(err.Error(), "no systemd user manager") {
		t.Errorf("restart with neither: %v", err)
	}
}
