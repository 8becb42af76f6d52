package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/testkit"
)

// readySpare waits for a spare in stateDir other than those named in not
// (one whose lock is in launches/) whose unit is up, READY sent, and
// returns its ID and unit. job is one of the same agent's jobs: a spare's
// unit is named as that job's is.
func readySpare(t *testing.T, stateDir string, job jobs.StartResult, not ...string) (id, unit string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() error {
		matches, _ := filepath.Glob(filepath.Join(stateDir, "launches", "*.spare"))
		for _, m := range matches {
			c := strings.TrimSuffix(filepath.Base(m), ".spare")
			if slices.Contains(not, c) {
				continue
			}
			id, unit = c, strings.Replace(job.Unit, job.ProcessID, c, 1)
			if p := unitShow(t, unit, "ActiveState"); p["ActiveState"] != "active" {
				return fmt.Errorf("the spare's unit %s is %s", unit, p["ActiveState"])
			}
			return nil
		}
		return errors.New("no spare directory")
	})
	return id, unit
}

// TestSpareServesAndIsSweptAfterAKill: commandcore mcp hands its next job
// to the spare it started after a launch; killed with SIGKILL, it leaves a
// spare whose supervisor exits (its pipe closed) and whose directory the
// next commandcore mcp removes.
func TestSpareServesAndIsSweptAfterAKill(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state, nil)
	var started []string
	stopAll := func(c *client) {
		for _, id := range started {
			c.stopAndWait(id)
		}
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			stopAll(c)
		}
	})
	first := c.start(map[string]any{"command": "exec sleep 60"})
	started = append(started, first.ProcessID)
	spare, _ := readySpare(t, state, first)
	next := c.start(map[string]any{"command": "exec sleep 60"})
	started = append(started, next.ProcessID)
	if next.ProcessID != spare || next.State != "running" {
		t.Fatalf("the next job is %s (%s), want the spare %s", next.ProcessID, next.State, spare)
	}

	left, unit := readySpare(t, state, first, spare)
	// status counts the spare beside the two jobs, not as one.
	if r, _ := statusOf(t, state); r.Jobs.Running != 2 || r.Jobs.Spares != 1 {
		t.Fatalf("status with two jobs and a spare: %+v", r.Jobs)
	}
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	c.session.Close()
	killed = true
	testkit.Eventually(t, 10*time.Second, func() error {
		if p := unitShow(t, unit, "ActiveState"); p["ActiveState"] != "inactive" {
			return fmt.Errorf("the dead agent's spare unit is %s", p["ActiveState"])
		}
		return nil
	})
	c2 := newClient(t, state, nil)
	t.Cleanup(func() { stopAll(c2) })
	if r, _ := statusOf(t, state); r.Jobs.Spares != 0 {
		t.Fatalf("status counts %d spares after the dead agent's was swept", r.Jobs.Spares)
	}
	if _, err := os.Lstat(filepath.Join(state, "jobs", left)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dead agent's spare directory stays: %v", err)
	}
	// Its jobs run on, managed by the next one.
	if rec := c2.status(next.ProcessID); rec.State != "running" {
		t.Fatalf("the job handed to the spare is %s after its agent died", rec.State)
	}
}
