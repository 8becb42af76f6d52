package jobs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/systemdtest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// unitProperty is what the user manager says of a unit's property.
func unitProperty(t *testing.T, unit, prop string) string {
	t.Helper()
	out, err := exec.Command("systemctl", "--user", "show", "-p", prop, "--value", unit).Output()
	if err != nil {
		t.Fatalf("systemctl show %s: %v", prop, err)
	}
	return strings.TrimSpace(string(out))
}

// openService opens the job core an agent assembles over stateDir, its
// launcher re-executing this test binary as the supervisor.
func openService(t *testing.T, stateDir string) *Service {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := Open(stateDir, exe, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc
}

func startSleeper(t *testing.T, svc *Service) *StartResult {
	t.Helper()
	res := startUnitJob(t, svc, StartRequest{Command: "exec sleep 60"})
	if res.State != jobmeta.Running || res.FailureDomain != jobmeta.DomainSystemdUnit || res.StartedAt == nil {
		t.Fatalf("a sleeper started %s in %s at %v, want running in a systemd unit, with its start time", res.State, res.FailureDomain, res.StartedAt)
	}
	return res
}

// TestJobUnitsShareTheJobsSlice: a job's unit runs in
// commandcore-jobs.slice, whose parent commandcore.slice sits beside
// app.slice (where the agent's service and, without Slice=, every
// transient unit runs) under the user manager's root slice, so all jobs
// weigh as one against the agent; stopping the job works there.
func TestJobUnitsShareTheJobsSlice(t *testing.T) {
	svc := openService(t, t.TempDir())
	res := startSleeper(t, svc)
	if got := unitProperty(t, res.Unit, "Slice"); got != "commandcore-jobs.slice" {
		t.Fatalf("the job's unit is in %q, want commandcore-jobs.slice", got)
	}
	cg := unitProperty(t, res.Unit, "ControlGroup")
	if !strings.HasSuffix(cg, "/commandcore.slice/commandcore-jobs.slice/"+res.Unit) {
		t.Fatalf("the job's cgroup is %s", cg)
	}
	if got := unitProperty(t, "commandcore.slice", "Slice"); got != "-.slice" {
		t.Fatalf("commandcore.slice is in %q, want the root slice", got)
	}
	if got := unitProperty(t, "app.slice", "Slice"); got != "-.slice" {
		t.Fatalf("app.slice is in %q: commandcore.slice is not its sibling", got)
	}
	if _, err := svc.Stop(principal.Local, res.ProcessID); err != nil {
		t.Fatal(err)
	}
	rec, err := svc.awaitTerminal(context.Background(), res.ProcessID, 10*time.Second)
	if err != nil || rec.State != jobmeta.StoppedByRequest {
		t.Fatalf("stopping it: %v %v", rec.State, err)
	}
}

// TestJobsFromBeforeTheSliceAreStillManaged simulates an agent upgraded
// over jobs its predecessor started without Slice= (in the manager's
// default, app.slice): the new agent still sees one run and stops it, and
// reconciles one whose supervisor was killed from its unit's retained
// Result, then clears the failed unit.
func TestJobsFromBeforeTheSliceAreStillManaged(t *testing.T) {
	state := t.TempDir()
	old := openService(t, state)
	old.launcher.Slice = ""
	stopped, killed := startSleeper(t, old), startSleeper(t, old)
	for _, res := range []*StartResult{stopped, killed} {
		if got := unitProperty(t, res.Unit, "Slice"); got != "app.slice" {
			t.Fatalf("an old agent's job is in %q, want app.slice", got)
		}
	}
	old.Close()

	svc := openService(t, state)
	if rec, err := svc.Status(principal.Local, stopped.ProcessID); err != nil || rec.State != jobmeta.Running {
		t.Fatalf("the upgraded agent sees an old job as %v (%v), want running", rec.State, err)
	}
	if _, err := svc.Stop(principal.Local, stopped.ProcessID); err != nil {
		t.Fatal(err)
	}
	if rec, err := svc.awaitTerminal(context.Background(), stopped.ProcessID, 10*time.Second); err != nil || rec.State != jobmeta.StoppedByRequest {
		t.Fatalf("stopping an old job: %v %v", rec.State, err)
	}

	rec, err := svc.Status(principal.Local, killed.ProcessID)
	if err != nil || rec.Claim == nil {
		t.Fatalf("an old job's record: %+v %v", rec, err)
	}
	if err := unix.Kill(rec.Claim.Supervisor.PID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if rec, err = svc.Status(principal.Local, killed.ProcessID); err != nil {
			t.Fatal(err)
		}
		if rec.State != jobmeta.WorkerLost {
			return fmt.Errorf("an old job whose supervisor was killed is %s, want worker_lost", rec.State)
		}
		return nil
	})
	// Only a unit whose Result was read and recorded is reset.
	if s := systemdtest.LoadState(t, killed.Unit); s != "not-found" {
		t.Fatalf("the old job's failed unit is still %s", s)
	}
}
