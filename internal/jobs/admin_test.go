package jobs

import (
	"slices"
	"syscall"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/principal"
)

// TestAdminSeesAndStopsEveryPrincipalsJob: an admin of the relay's panel
// lists every principal's jobs (also one from before jobs had owners),
// reads another principal's job and stops it, where a third principal
// finds nothing to stop.
func TestAdminSeesAndStopsEveryPrincipalsJob(t *testing.T) {
	svc := service(t, "/nonexistent")
	a, _ := liveJob(t, svc, "tok_a")
	b, sup := liveJob(t, svc, "tok_b")
	unowned, _ := liveJob(t, svc, "")
	admin := principal.Admin("alice")
	listed := func(who principal.Principal) []string {
		t.Helper()
		sums, err := svc.Summaries(who)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range sums {
			ids = append(ids, s.ProcessID)
		}
		slices.Sort(ids)
		return ids
	}
	all := []string{a, b, unowned}
	slices.Sort(all)
	if got := listed(admin); !slices.Equal(got, all) {
		t.Fatalf("the admin lists %v, want every job %v", got, all)
	}
	if got := listed("tok_a"); !slices.Equal(got, []string{a}) {
		t.Fatalf("tok_a lists %v, want its own job only", got)
	}
	if _, err := svc.Stop("tok_a", b); !errcode.Is(err, errcode.NotFound) {
		t.Fatalf("tok_a stopping tok_b's job: %v, want not_found", err)
	}
	if rec, err := svc.Status(admin, b); err != nil || rec.Owner != "tok_b" || rec.State != jobmeta.Running {
		t.Fatalf("the admin's status of tok_b's job: %+v, %v", rec, err)
	}
	rec, err := svc.Stop(admin, b)
	if err != nil || rec.StopRequestAt == nil {
		t.Fatalf("the admin's stop: %+v, %v; want a recorded stop request", rec, err)
	}
	// The job's supervisor got the stop's SIGTERM.
	sup.Wait()
	if ws, ok := sup.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("the supervisor ended with %v, want SIGTERM", sup.ProcessState)
	}
}
