package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobresources"
	"github.com/commandcore/commandcore/internal/launcher"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/testkit"
)

// readySpare waits until svc keeps a spare and returns its job ID.
func readySpare(t *testing.T, svc *Service) string {
	t.Helper()
	var id string
	testkit.Eventually(t, 10*time.Second, func() error {
		svc.spares.mu.Lock()
		defer svc.spares.mu.Unlock()
		if svc.spares.ready == nil {
			return errors.New("no spare is ready")
		}
		id = svc.spares.ready.id
		return nil
	})
	return id
}

// makingSpare returns the ID of the spare svc is starting, which it does
// right after a launch.
func makingSpare(t *testing.T, svc *Service) string {
	t.Helper()
	svc.spares.mu.Lock()
	defer svc.spares.mu.Unlock()
	if svc.spares.making == nil {
		t.Fatal("no spare is being started right after a launch")
	}
	return svc.spares.makingID
}

// spareGone waits until the spare id's unit has ended and its directory
// is gone.
func spareGone(t *testing.T, svc *Service, id string) {
	t.Helper()
	unit := launcher.UnitName(svc.deviceID, id)
	testkit.Eventually(t, 10*time.Second, func() error {
		if st := unitProperty(t, unit, "ActiveState"); st != "inactive" {
			return fmt.Errorf("the dismissed spare's unit is %s", st)
		}
		if _, err := os.Lstat(svc.store.Dir(id)); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the dismissed spare's directory stays: %v", err)
		}
		return nil
	})
}

// startUnitJob starts req as the local principal, and stops and resets
// its unit when the test ends.
func startUnitJob(t *testing.T, svc *Service, req StartRequest) *StartResult {
	t.Helper()
	res, err := svc.Start(context.Background(), principal.Local, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command("systemctl", "--user", "stop", res.Unit).Run()
		exec.Command("systemctl", "--user", "reset-failed", res.Unit).Run()
	})
	return res
}

// TestSpareServesTheNextJob: after a launch the service keeps a spare, up
// in its own unit and invisible as a job; the next job runs in it, started
// when it was handed over, and another spare follows.
func TestSpareServesTheNextJob(t *testing.T) {
	svc := openService(t, t.TempDir())
	svc.KeepSpares()
	first := startSleeper(t, svc)
	spare := readySpare(t, svc)
	unit := launcher.UnitName(svc.deviceID, spare)
	if st := unitProperty(t, unit, "ActiveState"); st != "active" {
		t.Fatalf("the spare's unit is %s, want active", st)
	}
	if recs, err := svc.List(principal.Local); err != nil || len(recs) != 1 || recs[0].ProcessID != first.ProcessID {
		t.Fatalf("with a spare, the jobs are %d records (%v), want the first job alone", len(recs), err)
	}

	before := time.Now()
	res := startUnitJob(t, svc, StartRequest{Command: "echo handed over; exec sleep 60"})
	if res.ProcessID != spare || res.Unit != unit || res.State != jobmeta.Running {
		t.Fatalf("the next job is %s in %s (%s), want the spare %s in %s", res.ProcessID, res.Unit, res.State, spare, unit)
	}
	// A running job has a start time in process.start's own answer.
	if res.StartedAt == nil || res.StartedAt.Before(before) || time.Now().Before(*res.StartedAt) {
		t.Fatalf("the job started at %v, not after it was handed over at %v", res.StartedAt, before)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		out, err := svc.Output(context.Background(), principal.Local, OutputRequest{ProcessID: res.ProcessID})
		if err != nil {
			return err
		}
		if out.Stdout.Data != "handed over\n" {
			return fmt.Errorf("stdout %q", out.Stdout.Data)
		}
		return nil
	})
	if _, err := os.Lstat(spareLock(svc, spare)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the job keeps the spare's lock file: %v", err)
	}
	if next := readySpare(t, svc); next == spare {
		t.Fatal("no new spare followed the one used")
	}
}

// TestSpareOnlyForTheUnitTheJobWouldGet: a job with a time limit starts
// its own unit (a running unit's RuntimeMaxSec cannot change) and leaves
// the spare; a changed policy dismisses the spare and the job gets the
// policy's niceness.
func TestSpareOnlyForTheUnitTheJobWouldGet(t *testing.T) {
	state := t.TempDir()
	svc := openService(t, state)
	svc.KeepSpares()
	startSleeper(t, svc)
	spare := readySpare(t, svc)

	timed := startUnitJob(t, svc, StartRequest{Command: "exec sleep 60", TimeoutS: 30})
	if timed.ProcessID == spare {
		t.Fatal("a job with a time limit was handed to the spare")
	}
	if got := unitProperty(t, timed.Unit, "RuntimeMaxUSec"); got == "infinity" {
		t.Fatalf("the timed job's unit has RuntimeMaxUSec=%s", got)
	}
	if got := readySpare(t, svc); got != spare {
		t.Fatalf("the spare became %s after a timed job", got)
	}

	if err := os.WriteFile(filepath.Join(state, jobresources.FileName), []byte(`{"nice": 7}`), 0o600); err != nil {
		t.Fatal(err)
	}
	niced := startUnitJob(t, svc, StartRequest{Command: "exec sleep 60"})
	if niced.ProcessID == spare {
		t.Fatal("a job under a changed policy was handed to the old spare")
	}
	if got := unitProperty(t, niced.Unit, "Nice"); got != "7" {
		t.Fatalf("the job under nice 7 has Nice=%s", got)
	}
	spareGone(t, svc, spare)
	if next := readySpare(t, svc); unitProperty(t, launcher.UnitName(svc.deviceID, next), "Nice") != "7" {
		t.Fatal("the new spare is not at the new policy's niceness")
	}
}

// TestSpareDismissedWhenIdleOrClosed: a spare no job came for within its
// idle time is dismissed, its unit ended and its directory removed; so is
// the spare of a service that closes.
func TestSpareDismissedWhenIdleOrClosed(t *testing.T) {
	svc := openService(t, t.TempDir())
	setIdle := func(d time.Duration) {
		svc.spares.mu.Lock()
		svc.spares.idle = d
		svc.spares.mu.Unlock()
	}
	setIdle(300 * time.Millisecond)
	svc.KeepSpares()
	startSleeper(t, svc)
	// Named while it starts: once up, it waits only 300 ms.
	spareGone(t, svc, makingSpare(t, svc))

	setIdle(time.Hour)
	startSleeper(t, svc)
	spare := readySpare(t, svc)
	svc.closeSpares()
	spareGone(t, svc, spare)
}

// TestDeadSpareIsNotUsed: a spare whose supervisor was killed is not
// handed a job; the job starts in a unit of its own.
func TestDeadSpareIsNotUsed(t *testing.T) {
	svc := openService(t, t.TempDir())
	svc.KeepSpares()
	startSleeper(t, svc)
	spare := readySpare(t, svc)
	unit := launcher.UnitName(svc.deviceID, spare)
	if out, err := exec.Command("systemctl", "--user", "kill", "--signal=KILL", unit).CombinedOutput(); err != nil {
		t.Fatalf("kill the spare: %v: %s", err, out)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if st := unitProperty(t, unit, "ActiveState"); st == "active" {
			return fmt.Errorf("the killed spare's unit is %s", st)
		}
		return nil
	})
	res := startUnitJob(t, svc, StartRequest{Command: "exec sleep 60"})
	if res.ProcessID == spare || res.State != jobmeta.Running {
		t.Fatalf("after the spare died the job is %s (%s)", res.ProcessID, res.State)
	}
	exec.Command("systemctl", "--user", "reset-failed", unit).Run()
}

// TestLaunchWaitsForTheSpareBeingStarted: a launch that comes while the
// spare for its unit is still starting (a user manager slow to start it)
// waits for that spare rather than start a unit beside it, and runs in it
// once it is up.
func TestLaunchWaitsForTheSpareBeingStarted(t *testing.T) {
	svc := openService(t, t.TempDir())
	// Each spare's start waits for a word from the test.
	unit := make(chan struct{})
	svc.slowSpareStart = func() { <-unit }
	t.Cleanup(func() { close(unit) })
	svc.KeepSpares()
	startSleeper(t, svc)
	for i := range 3 {
		making := makingSpare(t, svc)
		done := make(chan *StartResult, 1)
		go func() {
			res, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "exec sleep 60"})
			if err != nil {
				t.Errorf("launch %d: %v", i, err)
			}
			done <- res
		}()
		select {
		case res := <-done:
			t.Fatalf("launch %d answered (%+v) while its spare was still starting", i, res)
		case <-time.After(300 * time.Millisecond):
		}
		unit <- struct{}{}
		res := <-done
		if res == nil {
			t.FailNow()
		}
		t.Cleanup(func() {
			exec.Command("systemctl", "--user", "stop", res.Unit).Run()
			exec.Command("systemctl", "--user", "reset-failed", res.Unit).Run()
		})
		if res.ProcessID != making {
			t.Fatalf("launch %d ran %s, not in the spare %s that was starting", i, res.ProcessID, making)
		}
	}
}

// spareLock is where the process keeping spare id holds its lock.
func spareLock(svc *Service, id string) string {
	return filepath.Join(svc.stateDir, "launches", id+".spare")
}

// TestRefusedJobLeavesTheSpare: a job the full table refuses is not
// launched, and the spare it was to take waits on for the next one.
func TestRefusedJobLeavesTheSpare(t *testing.T) {
	svc := openService(t, t.TempDir())
	svc.KeepSpares()
	startSleeper(t, svc)
	spare := readySpare(t, svc)
	for range limits.MaxLiveJobs - 1 {
		liveJob(t, svc, string(principal.Local))
	}
	_, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "exec sleep 60"})
	if got := errcode.From(err).Code; got != errcode.JobTableFull {
		t.Fatalf("a start with %d live jobs: %v, want %s", limits.MaxLiveJobs, err, errcode.JobTableFull)
	}
	if got := readySpare(t, svc); got != spare {
		t.Fatalf("after a refused job the spare is %s, want %s kept", got, spare)
	}
	if st := unitProperty(t, launcher.UnitName(svc.deviceID, spare), "ActiveState"); st != "active" {
		t.Fatalf("the kept spare's unit is %s", st)
	}
	if _, err := os.Stat(spareLock(svc, spare)); err != nil {
		t.Fatalf("the kept spare lost its lock file: %v", err)
	}
}

// TestSpareThatFailsIsNotKept: a spare whose supervisor ends before READY
// (here the supervisor binary is one that exits at once) is not kept, and
// leaves no directory behind.
func TestSpareThatFailsIsNotKept(t *testing.T) {
	state := t.TempDir()
	svc, err := Open(state, "/bin/false", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	svc.KeepSpares()
	res, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != jobmeta.LaunchFailed {
		t.Fatalf("a job whose supervisor exits at once is %s, want %s", res.State, jobmeta.LaunchFailed)
	}
	spare := makingSpare(t, svc)
	t.Cleanup(func() {
		exec.Command("systemctl", "--user", "reset-failed", res.Unit, launcher.UnitName(svc.deviceID, spare)).Run()
	})
	testkit.Eventually(t, 10*time.Second, func() error {
		svc.spares.mu.Lock()
		defer svc.spares.mu.Unlock()
		if svc.spares.making != nil {
			return errors.New("the spare is still starting")
		}
		if svc.spares.ready != nil {
			return fmt.Errorf("the failed spare %s is kept", svc.spares.ready.id)
		}
		return nil
	})
	if _, err := os.Lstat(svc.store.Dir(spare)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the failed spare's directory stays: %v", err)
	}
}
