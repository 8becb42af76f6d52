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
