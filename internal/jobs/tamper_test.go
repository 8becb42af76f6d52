package jobs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/systemdtest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// A job's processes can write its own directory. These tests run real
// jobs on the user manager that rewrite their own files as an attacker's
// command would, with the agent's directories hidden from them and, in
// the "cut" runs, cut off from the user manager too, and check that what
// they wrote decides nothing.

const mallory, victim = principal.Principal("mallory"), principal.Principal("victim")

// confinedService is a Service over the real supervisor whose job units
// run with the agent's directories hidden and, when cut, cut off from the
// user manager, as the agent starts them.
func confinedService(t *testing.T, cut bool) *Service {
	t.Helper()
	svc := realService(t)
	if h := svc.HideOwnDirs(context.Background(), t.TempDir(), func() (bool, error) { return cut, nil }); !h.Units {
		t.Fatal("this user manager cannot hide the agent's directories from a job unit")
	}
	if cut && !svc.launcher.CanCutOff(jobmeta.DomainSystemdUnit) {
		t.Fatal("this user manager cannot start a job unit cut off from itself")
	}
	return svc
}

// eachConfinement runs test against a service whose jobs reach the user
// manager, and one whose jobs are cut off from it.
func eachConfinement(t *testing.T, test func(t *testing.T, svc *Service)) {
	for _, cut := range []bool{false, true} {
		t.Run(fmt.Sprintf("cut=%v", cut), func(t *testing.T) { test(t, confinedService(t, cut)) })
	}
}

// tamperingJob starts, as who (with key, when set), a job that finds its
// own directory as any command can (the last argument of its supervisor,
// its parent), runs tamper there, prints "tampered" and sleeps on. It
// returns once the tampering is done. The job's unit is stopped when the
// test ends.
func tamperingJob(t *testing.T, svc *Service, who principal.Principal, key, tamper string) *StartResult {
	t.Helper()
	cmd := `D=$(tr '\0' '\n' </proc/$PPID/cmdline | tail -n 1) && cd "$D" && ` + tamper + ` && echo tampered; exec sleep 60`
	res, err := svc.Start(context.Background(), who, StartRequest{Command: cmd, IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command("systemctl", "--user", "stop", res.Unit).Run()
		exec.Command("systemctl", "--user", "reset-failed", res.Unit).Run()
	})
	if res.State != jobmeta.Running || res.FailureDomain != jobmeta.DomainSystemdUnit {
		t.Fatalf("the tampering job started %s in %s", res.State, res.FailureDomain)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		out, err := svc.Output(context.Background(), principal.Local, OutputRequest{ProcessID: res.ProcessID})
		if err != nil {
			return err
		}
		if out.Stdout.Data != "tampered\n" {
			return fmt.Errorf("the job's stdout %q, stderr %q", out.Stdout.Data, out.Stderr.Data)
		}
		return nil
	})
	return res
}

// jobFile is what a job's job.json holds now.
func jobFile(t *testing.T, svc *Service, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(svc.store.Dir(id), jobmeta.JobFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// listed reports whether who's process.jobs lists job id, and as whose.
func listed(t *testing.T, svc *Service, who principal.Principal, id string) (bool, string) {
	t.Helper()
	sums, err := svc.Summaries(who)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sums {
		if s.ProcessID == id {
			return true, s.Owner
		}
	}
	return false, ""
}

// stopsForReal stops job id as who and checks that its unit ends and the
// job reads as stopped by the request.
func stopsForReal(t *testing.T, svc *Service, who principal.Principal, res *StartResult) {
	t.Helper()
	if _, err := svc.Stop(who, res.ProcessID); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if s := systemdtest.LoadState(t, res.Unit); s != "not-found" {
			return fmt.Errorf("after process.stop the job's unit is %s", s)
		}
		return nil
	})
	rec, err := svc.awaitTerminal(context.Background(), res.ProcessID, 10*time.Second)
	if err != nil || rec.State != jobmeta.StoppedByRequest {
		t.Fatalf("the stopped job: %+v, %v; want stopped_by_request", rec, err)
	}
}

// TestJobCannotChangeItsOwner: a job that rewrites the owner in its
// job.json to another principal is not that principal's (not listed, not
// found) and still its starter's; one that empties it still lists for its
// starter.
func TestJobCannotChangeItsOwner(t *testing.T) {
	eachConfinement(t, func(t *testing.T, svc *Service) {
		framed := tamperingJob(t, svc, mallory, "", `sed 's/"owner":"mallory"/"owner":"victim"/' job.json >j && mv j job.json`)
		if !strings.Contains(jobFile(t, svc, framed.ProcessID), `"owner":"victim"`) {
			t.Fatalf("the job did not rewrite its job.json: %s", jobFile(t, svc, framed.ProcessID))
		}
		if in, _ := listed(t, svc, victim, framed.ProcessID); in {
			t.Fatal("a job that wrote another principal's name into its job.json is listed as that principal's")
		}
		if _, err := svc.Status(victim, framed.ProcessID); !errcode.Is(err, errcode.NotFound) {
			t.Fatalf("the framed principal's process.status: %v, want not_found", err)
		}
		if in, owner := listed(t, svc, mallory, framed.ProcessID); !in || owner != string(mallory) {
			t.Fatalf("its starter lists it: %v, as %q", in, owner)
		}

		hidden := tamperingJob(t, svc, mallory, "", `sed 's/"owner":"mallory"/"owner":""/' job.json >j && mv j job.json`)
		if in, owner := listed(t, svc, mallory, hidden.ProcessID); !in || owner != string(mallory) {
			t.Fatalf("a job that emptied its owner: listed for its starter %v, as %q", in, owner)
		}
		stopsForReal(t, svc, mallory, framed)
		stopsForReal(t, svc, mallory, hidden)
	})
}

// TestJobCannotWriteItsOwnEnd: a job that writes its own result.json still
// runs as far as the agent is concerned: its status is running, it counts
// toward the live jobs (the next start past the limit is refused), and
// process.stop stops it for real.
func TestJobCannotWriteItsOwnEnd(t *testing.T) {
	eachConfinement(t, func(t *testing.T, svc *Service) {
		res := tamperingJob(t, svc, mallory, "",
			`printf '{"schema":1,"exit_code":0,"completed_at":"2026-01-01T00:00:00Z","capture":{"stdout":{"complete":true},"stderr":{"complete":true}}}' >r && mv r result.json`)
		rec, err := svc.Status(mallory, res.ProcessID)
		if err != nil || rec.State != jobmeta.Running || rec.Terminal {
			t.Fatalf("a job that wrote its own result.json reads as %+v, %v; want running", rec, err)
		}
		for range limits.MaxLiveJobs - 1 {
			liveJob(t, svc, string(principal.Local))
		}
		if _, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "true"}); !errcode.Is(err, errcode.JobTableFull) {
			t.Fatalf("a start beside %d live jobs, one of which wrote its own end: %v, want job_table_full", limits.MaxLiveJobs, err)
		}
		stopsForReal(t, svc, mallory, res)
	})
}

// TestJobCannotMakeItselfASpare: a job that deletes its job.json and
// creates a spare's lock file is still a listed, running job, which the
// sweep of dead spares (each agent's start) leaves alone, and which
// process.stop stops.
func TestJobCannotMakeItselfASpare(t *testing.T) {
	eachConfinement(t, func(t *testing.T, svc *Service) {
		res := tamperingJob(t, svc, mallory, "", `rm job.json && : >spare.lock`)
		if err := svc.store.SweepSpares(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(svc.store.Dir(res.ProcessID)); err != nil {
			t.Fatalf("the sweep removed the job's directory: %v", err)
		}
		if in, _ := listed(t, svc, mallory, res.ProcessID); !in {
			t.Fatal("a job without its job.json is not listed")
		}
		if rec, err := svc.Status(mallory, res.ProcessID); err != nil || rec.State != jobmeta.Running {
			t.Fatalf("a job without its job.json: %+v, %v; want running", rec, err)
		}
		if n, err := svc.store.Spares(); err != nil || n != 0 {
			t.Fatalf("spares: %d, %v; want none", n, err)
		}
		stopsForReal(t, svc, mallory, res)
	})
}

// TestJobCannotTakeAnotherPrincipalsKey: a job that writes another
// principal's name and idempotency key digest into its job.json takes
// nothing from them: their start with that key launches their own job,
// and their retry finds it.
func TestJobCannotTakeAnotherPrincipalsKey(t *testing.T) {
	eachConfinement(t, func(t *testing.T, svc *Service) {
		const theirs = "deploy-42"
		res := tamperingJob(t, svc, mallory, "mine",
			`sed -e 's/"owner":"mallory"/"owner":"victim"/' -e 's/`+keyDigest("mine")+`/`+keyDigest(theirs)+`/' job.json >j && mv j job.json`)
		if got := jobFile(t, svc, res.ProcessID); !strings.Contains(got, keyDigest(theirs)) {
			t.Fatalf("the job did not write the key's digest: %s", got)
		}
		req := StartRequest{Command: "exec sleep 60", IdempotencyKey: theirs}
		first, err := svc.Start(context.Background(), victim, req)
		if err != nil || first.Reused || first.ProcessID == res.ProcessID {
			t.Fatalf("the principal's own start with its key: %+v, %v; want a new job", first, err)
		}
		again, err := svc.Start(context.Background(), victim, req)
		if err != nil || !again.Reused || again.ProcessID != first.ProcessID {
			t.Fatalf("the principal's retry: %+v, %v; want its job %s", again, err, first.ProcessID)
		}
		stopsForReal(t, svc, victim, first)
		stopsForReal(t, svc, mallory, res)
	})
}
