package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/launcher"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/systemdtest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// unitShow returns the unit's properties as systemctl shows them.
func unitShow(t *testing.T, unit string, props ...string) map[string]string {
	t.Helper()
	out, err := exec.Command("systemctl", append([]string{"--user", "show", unit, "-p"}, strings.Join(props, ","))...).Output()
	if err != nil {
		t.Fatalf("systemctl show: %v", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// awaitFailedUnit waits until the unit has ended failed and returns its
// Result: what it would keep loaded without a reset.
func awaitFailedUnit(t *testing.T, unit string) string {
	t.Helper()
	var p map[string]string
	testkit.Eventually(t, 10*time.Second, func() error {
		if p = unitShow(t, unit, "ActiveState", "Result"); p["ActiveState"] != "failed" {
			return fmt.Errorf("unit %s did not end failed: %v", unit, p)
		}
		return nil
	})
	return p["Result"]
}

// awaitEndedUnit waits until the unit has ended, failed or inactive (or
// is already gone), and returns its state and result.
func awaitEndedUnit(t *testing.T, unit string) string {
	t.Helper()
	var p map[string]string
	testkit.Eventually(t, 10*time.Second, func() error {
		if p = unitShow(t, unit, "ActiveState", "Result"); p["ActiveState"] != "failed" && p["ActiveState"] != "inactive" {
			return fmt.Errorf("unit %s did not end: %v", unit, p)
		}
		return nil
	})
	return p["ActiveState"] + "/" + p["Result"]
}

// awaitReleased runs ReleaseUnits, as the agent's tick does, until the
// unit is no longer loaded.
func awaitReleased(t *testing.T, svc *Service, unit string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() error {
		svc.ReleaseUnits(context.Background())
		if s := systemdtest.LoadState(t, unit); s != "not-found" {
			return fmt.Errorf("unit %s is still loaded (%s) after the job's end was recorded", unit, s)
		}
		return nil
	})
}

// endOf is what a job's record says of its end.
func endOf(r *jobmeta.Record) string {
	code := "none"
	if r.ExitCode != nil {
		code = strconv.Itoa(*r.ExitCode)
	}
	return fmt.Sprintf("%s stopped_by=%q signal=%q exit=%s error=%q completed_at=%v", r.State, r.StoppedBy, r.Signal, code, r.Error, r.CompletedAt)
}

// resetLeftovers resets units a failed test left loaded, so the shared
// manager is not littered.
func resetLeftovers(t *testing.T, units ...*string) {
	t.Cleanup(func() {
		for _, u := range units {
			if *u != "" {
				exec.Command("systemctl", "--user", "reset-failed", *u).Run()
			}
		}
	})
}

// TestBackstopUnitIsReleased: a job whose supervisor could not act at its
// limit (SIGSTOPped here) is met by the unit's RuntimeMaxSec backstop
// (1 + 3 + 5 s), which leaves the unit failed with Result=timeout. Once
// the supervisor's record of the end is on disk, the unit is reset, and
// the record reads as before.
func TestBackstopUnitIsReleased(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	svc := service(t, exe)
	res, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "exec sleep 60", TimeoutS: 1})
	if err != nil {
		t.Fatal(err)
	}
	unit := res.Unit
	resetLeftovers(t, &unit)
	var rec *jobmeta.Record
	testkit.Eventually(t, 5*time.Second, func() error {
		if rec, err = svc.Status(principal.Local, res.ProcessID); err != nil {
			t.Fatal(err)
		}
		if rec == nil || rec.Claim == nil || rec.Claim.Child == nil {
			return errors.New("the job's shell was never recorded")
		}
		return nil
	})
	if err := syscall.Kill(rec.Claim.Supervisor.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	rec, err = svc.awaitTerminal(context.Background(), res.ProcessID, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != jobmeta.TimedOut || rec.StoppedBy != "timeout" || rec.Signal != "SIGTERM" {
		t.Fatalf("the backstop's end: %s, want timed_out by the time limit's SIGTERM", endOf(rec))
	}
	if r := awaitFailedUnit(t, unit); r != "timeout" {
		t.Fatalf("unit Result %q, want timeout: the backstop did not act", r)
	}
	before := endOf(rec)
	awaitReleased(t, svc, unit)
	after, err := svc.Status(principal.Local, res.ProcessID)
	if err != nil {
		t.Fatal(err)
	}
	if endOf(after) != before {
		t.Fatalf("releasing the unit changed the record: %s, was %s", endOf(after), before)
	}
}

// TestReleaseUnitsTouchesOnlyThisDevicesJobs: a failed unit named for a
// job of this device that is no longer in the store (forgotten) is reset;
// one named for another device's job, and a reset asked for under a name
// that is not the job's, are left alone.
func TestReleaseUnitsTouchesOnlyThisDevicesJobs(t *testing.T) {
	svc := service(t, "/bin/false")
	failed := func(unit string) {
		t.Helper()
		if out, err := exec.Command("systemd-run", "--user", "--quiet", "--unit="+unit, "/bin/false").CombinedOutput(); err != nil {
			t.Fatalf("systemd-run: %v %s", err, out)
		}
		awaitFailedUnit(t, unit)
	}
	forgotten := launcher.UnitName(svc.deviceID, uuid.NewString())
	other := launcher.UnitName(uuid.NewString(), uuid.NewString())
	resetLeftovers(t, &forgotten, &other)
	failed(forgotten)
	failed(other)

	awaitReleased(t, svc, forgotten)
	if s := unitShow(t, other, "ActiveState")["ActiveState"]; s != "failed" {
		t.Fatalf("another device's failed unit is now %s", s)
	}
	id, _ := launcher.UnitJob(svc.deviceID, forgotten)
	if err := svc.store.ResetUnit(id, other); !errors.Is(err, errNotOwnUnit) {
		t.Fatalf("reset of another device's unit under this device's job: %v", err)
	}
	if s := unitShow(t, other, "ActiveState")["ActiveState"]; s != "failed" {
		t.Fatalf("another device's failed unit is now %s", s)
	}
}
