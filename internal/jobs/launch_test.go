package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/commandcore/commandcore/internal/hideexec"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/launcher"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/roles"
	"github.com/commandcore/commandcore/internal/supervisor"
	"github.com/commandcore/commandcore/internal/systemdtest"
	"github.com/commandcore/commandcore/internal/testkit"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the supervisor (`EXE supervise DIR`), so
	// launches from here run the real one, and as the hide-exec role, so
	// that HideOwnDirs's probes of it answer (rather than run this test
	// binary until they time out).
	if len(os.Args) > 1 && os.Args[1] == roles.HideExec {
		os.Exit(hideexec.Main(os.Args[2:], os.Stderr))
	}
	if len(os.Args) == 3 && os.Args[1] == "supervise" {
		systemdtest.WithoutRaceExitPause()
		// The service's state directory, two up from the job's.
		systemdtest.RedirectNotify(filepath.Dir(filepath.Dir(os.Args[2])))
		if err := supervisor.Run(os.Args[2], os.Stdin, procid.Default()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	systemdtest.Main(m)
}

// service returns a Service whose launcher re-executes exe instead of
// commandcore, to cause launch failures for real.
func service(t testing.TB, exe string) *Service {
	t.Helper()
	state := t.TempDir()
	procs := procid.Default()
	store, err := jobstore.Open(state, procs)
	if err != nil {
		t.Fatal(err)
	}
	l := launcher.New(exe, false)
	t.Cleanup(l.Close)
	// A device of its own: ReleaseUnits resets the failed units of the
	// device's jobs that are not in its store.
	device := uuid.NewString()
	askUnits(store, l, device)
	svc := &Service{
		store: store, launcher: l, procs: procs, stateDir: state,
		deviceID: device, shell: "/bin/sh",
		baseEnv: []string{"PATH=/usr/bin:/bin"}, claimTimeout: time.Second,
	}
	// Before the state directory goes.
	t.Cleanup(svc.recording.Wait)
	return svc
}

func script(t testing.TB, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake-commandcore")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClaimTimeoutStopsTheUnit(t *testing.T) {
	// A supervisor that never claims its identity.
	svc := service(t, script(t, "exec sleep 600"))
	begin := time.Now()
	res, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != jobmeta.LaunchFailed || !res.Terminal || res.FailureDomain != jobmeta.DomainSystemdUnit {
		t.Fatalf("got state %s domain %s, want launch_failed in a systemd unit", res.State, res.FailureDomain)
	}
	if took := time.Since(begin); took < svc.claimTimeout {
		t.Fatalf("gave up after %v, before the claim timeout", took)
	}
	rec, err := svc.Status(principal.Local, res.ProcessID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Error != jobmeta.LaunchErrClaimTimeout || !rec.Read {
		t.Fatalf("record error %q read %v", rec.Error, rec.Read)
	}
	if s := systemdtest.LoadState(t, rec.Unit); s != "not-found" {
		t.Fatalf("the abandoned unit is still %s", s)
	}
}

func TestSupervisorDyingBeforeClaimFailsFast(t *testing.T) {
	svc := service(t, script(t, "exit 3"))
	svc.claimTimeout = 20 * time.Second
	begin := time.Now()
	res, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := svc.Status(principal.Local, res.ProcessID)
	if res.State != jobmeta.LaunchFailed || rec.Error != jobmeta.LaunchErrSupervisor {
		t.Fatalf("got %s (%s), want launch_failed (supervisor_failed)", res.State, rec.Error)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Fatalf("took %v to notice the supervisor died", took)
	}
	if s := systemdtest.LoadState(t, rec.Unit); s != "not-found" {
		t.Fatalf("the failed unit is still %s", s)
	}
}

func TestFailedLaunchesFreeTheirSlots(t *testing.T) {
	svc := service(t, script(t, "exit 3"))
	for i := 0; i < 40; i++ {
		if _, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "true"}); err != nil {
			t.Fatalf("launch %d: %v", i, err)
		}
	}
	recs, err := svc.List(principal.Local)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.State != jobmeta.LaunchFailed {
			t.Fatalf("job %s is %s", r.ProcessID, r.State)
		}
	}
}

func TestLedgerReleasesInReverseOrder(t *testing.T) {
	var l ledger
	var got []string
	for _, n := range []string{"admission slot", "pipe", "unit"} {
		n := n
		l.add(n, func() { got = append(got, n) })
	}
	order := l.releaseAll()
	if strings.Join(got, ",") != "unit,pipe,admission slot" || strings.Join(order, ",") != "unit,pipe,admission slot" {
		t.Fatalf("released %v (reported %v)", got, order)
	}
	if len(l.releaseAll()) != 0 {
		t.Fatal("a second release released again")
	}
}

// TestReadyAstrayAnswersFromTheClaim: with the unit's READY going to a
// socket not its manager's, its start job never completes; the
// supervisor's claim on disk answers process.start all the same, the job
// keeps running past the claim timeout and ends as its supervisor
// recorded, never launch_failed; its unit, failed, is then reset.
func TestReadyAstrayAnswersFromTheClaim(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	svc := service(t, exe)
	// Its supervisors send READY to a socket of the test's own: only this
	// service's units lose theirs.
	notify := systemdtest.NewAstrayNotify(t)
	notify.RedirectTo(t, svc.stateDir)
	quick, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "echo hello; exit 3", WaitMS: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	resetLeftovers(t, &quick.Unit)
	if quick.State != jobmeta.Exited || quick.ExitCode == nil || *quick.ExitCode != 3 || quick.Error != "" {
		t.Fatalf("a job whose READY went astray ended %s exit %v error %q; want exited 3", quick.State, quick.ExitCode, quick.Error)
	}
	if out := quick.Output.Stdout; out.Encoding != "utf-8" || out.Data != "hello\n" {
		t.Fatalf("its output: %+v", out)
	}

	long, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "exec sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	resetLeftovers(t, &long.Unit)
	if long.State != jobmeta.Running {
		t.Fatalf("a running job whose READY went astray: %s, want running", long.State)
	}
	// The second launch no longer waits for a READY (the first missed
	// one), so its READY may reach the other socket after Start answered.
	testkit.Eventually(t, 5*time.Second, func() error {
		if n := notify.Astray(); n < 2 {
			return fmt.Errorf("%d READY messages reached the other socket; the units' did not go astray", n)
		}
		return nil
	})
	// Past the claim timeout nothing rolled it back.
	time.Sleep(svc.claimTimeout + 500*time.Millisecond)
	rec, err := svc.Status(principal.Local, long.ProcessID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != jobmeta.Running {
		t.Fatalf("after the claim timeout the job is %s (%s), want running", rec.State, rec.Error)
	}
	if _, err := svc.Stop(principal.Local, long.ProcessID); err != nil {
		t.Fatal(err)
	}
	rec, err = svc.awaitTerminal(context.Background(), long.ProcessID, 10*time.Second)
	if err != nil || rec.State != jobmeta.StoppedByRequest {
		t.Fatalf("stopping it: %v %v", rec.State, err)
	}

	// A unit that never got its READY ends once its supervisor exits:
	// failed ("protocol") when the supervisor exited by itself; the one
	// stopped by a signal ended failed too under Debian's systemd 252.38
	// and ends inactive under 252.39 (measured here: a clean signal death
	// before READY is no longer a protocol failure). With the job's end on record it is released,
	// and the record reads as before.
	for _, j := range []struct{ id, unit string }{{quick.ProcessID, quick.Unit}, {long.ProcessID, long.Unit}} {
		before, err := svc.Status(principal.Local, j.id)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("unit after a READY astray: %s", awaitEndedUnit(t, j.unit))
		awaitReleased(t, svc, j.unit)
		after, err := svc.Status(principal.Local, j.id)
		if err != nil {
			t.Fatal(err)
		}
		if endOf(after) != endOf(before) {
			t.Fatalf("releasing the unit changed the record: %s, was %s", endOf(after), endOf(before))
		}
	}
}

// BenchmarkStartWhileReadyAstray: process.start of a job with the user
// manager's notify socket its own and taken over. Only the first launch
// after a READY went astray waits readyGrace for it.
func BenchmarkStartWhileReadyAstray(b *testing.B) {
	systemdtest.Exclusive(b)
	m, err := systemdtest.Ensure()
	if err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	launch := func(b *testing.B, svc *Service) {
		for i := 0; i < b.N; i++ {
			res, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "exec sleep 60"})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			svc.Stop(principal.Local, res.ProcessID)
			if _, err := svc.awaitTerminal(context.Background(), res.ProcessID, 10*time.Second); err != nil {
				b.Fatal(err)
			}
			svc.ReleaseUnits(context.Background())
			svc.Forget(principal.Local, res.ProcessID)
			b.StartTimer()
		}
	}
	b.Run("notify socket its own", func(b *testing.B) { launch(b, service(b, exe)) })
	b.Run("READY astray", func(b *testing.B) {
		svc := service(b, exe)
		b.Cleanup(func() {
			// Units that never got their READY end failed a moment after
			// their jobs; their jobs are forgotten, so they all go.
			time.Sleep(time.Second)
			svc.ReleaseUnits(context.Background())
		})
		notify, err := m.TakeOverNotifySocket()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { notify.Release() })
		launch(b, svc)
	})
}

// TestRetentionsDiscardIsRemovedAfterTheLaunch: a launch into a table full
// of read final jobs takes the oldest out of the table and, once it has
// answered, removes its files without waiting for the service to close.
func TestRetentionsDiscardIsRemovedAfterTheLaunch(t *testing.T) {
	state := t.TempDir()
	svc := openService(t, state)
	ctx := context.Background()
	var first string
	for i := range limits.MaxRetainedTerminalJobs {
		res, err := svc.Start(ctx, principal.Local, StartRequest{Command: "true", WaitMS: 10000})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Terminal {
			t.Fatalf("job %d is still %s", i, res.State)
		}
		// Read to its end: retention may discard it.
		if _, err := svc.Output(ctx, principal.Local, OutputRequest{ProcessID: res.ProcessID}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = res.ProcessID
		}
	}
	if _, err := svc.Status(principal.Local, first); err != nil {
		t.Fatalf("the oldest job before the table is full: %v", err)
	}
	if _, err := svc.Start(ctx, principal.Local, StartRequest{Command: "true", WaitMS: 10000}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Status(principal.Local, first); err == nil {
		t.Fatal("the oldest read job is still in the table")
	}
	if err := testkit.Poll(10*time.Second, func() error {
		entries, err := os.ReadDir(filepath.Join(state, "jobs"))
		if err != nil {
			return err
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".discarded-") {
				return fmt.Errorf("%s is left after the launch", e.Name())
			}
		}
		if _, err := os.Stat(filepath.Join(state, "launches", first+".json")); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the discarded job's launch record: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
