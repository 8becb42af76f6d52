package jobs

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/procid"
)

// liveJob records a fallback job whose supervisor is a real sleep process,
// owned by owner, and returns its ID and the process (kill it to make the
// supervisor vanish).
func liveJob(t *testing.T, svc *Service, owner string) (string, *exec.Cmd) {
	t.Helper()
	id, sup, _ := fallbackJob(t, svc, owner, nil)
	return id, sup
}

// fallbackJob is liveJob with the supervisor's claim changed by edit
// before it is recorded; it also returns the real process's identity.
func fallbackJob(t *testing.T, svc *Service, owner string, edit func(*jobmeta.Claim)) (string, *exec.Cmd, procid.Identity) {
	t.Helper()
	sup := exec.Command("sleep", "60")
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sup.Process.Kill(); sup.Wait() })
	cur, _, err := svc.procs.Lookup(sup.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	boot, _ := svc.procs.BootID()
	id := uuid.NewString()
	job := &jobmeta.Job{Schema: 1, ID: id, DeviceID: svc.deviceID, Owner: owner, FailureDomain: jobmeta.DomainSharedParentCgroup, CreatedAt: time.Now().UTC()}
	if err := svc.store.Admit(job); err != nil {
		t.Fatal(err)
	}
	claim := &jobmeta.Claim{Schema: 1, Supervisor: cur, BootID: boot, ClaimedAt: time.Now().UTC()}
	if edit != nil {
		edit(claim)
	}
	if err := atomicfile.WriteJSON(filepath.Join(svc.store.Dir(id), jobmeta.ClaimFile), claim); err != nil {
		t.Fatal(err)
	}
	// As the launcher records the supervisor it forked.
	if err := svc.store.RecordSupervisor(id, claim.Supervisor); err != nil {
		t.Fatal(err)
	}
	return id, sup, cur
}

func ms(n int) *int { return &n }

func TestWaitRefusesBadRequests(t *testing.T) {
	svc := service(t, "/nonexistent")
	id, _ := liveJob(t, svc, "")
	ids := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = uuid.NewString()
		}
		return out
	}
	for name, req := range map[string]WaitRequest{
		"no ids":            {},
		"33 ids":            {ProcessIDs: ids(33)},
		"an id twice":       {ProcessIDs: []string{id, id}},
		"unknown mode":      {ProcessIDs: []string{id}, Mode: "first"},
		"mode in capitals":  {ProcessIDs: []string{id}, Mode: "ALL"},
		"negative timeout":  {ProcessIDs: []string{id}, TimeoutMS: ms(-1)},
		"timeout past 600s": {ProcessIDs: []string{id}, TimeoutMS: ms(600001)},
	} {
		if _, err := svc.Wait(context.Background(), principal.Local, req, nil); !errcode.Is(err, errcode.InvalidArgument) {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
	// The bounds themselves are accepted: 32 ids (all unknown here, so
	// not_found, not invalid_argument) and 600000 ms.
	if _, err := svc.Wait(context.Background(), principal.Local, WaitRequest{ProcessIDs: ids(32)}, nil); !errcode.Is(err, errcode.NotFound) {
		t.Errorf("32 unknown ids: %v, want not_found", err)
	}
	res, err := svc.Wait(context.Background(), principal.Local, WaitRequest{ProcessIDs: []string{id}, TimeoutMS: ms(0), Mode: WaitAll}, nil)
	if err != nil || len(res.Pending) != 1 || len(res.Ended) != 0 || res.Met != MetTimeout {
		t.Fatalf("timeout_ms 0 on a live job: %+v %v", res, err)
	}
}

// TestWaitHidesOtherPrincipalsJobs: another principal's job answers
// exactly as a job that does not exist; the owner's local principal sees it.
func TestWaitHidesOtherPrincipalsJobs(t *testing.T) {
	svc := service(t, "/nonexistent")
	theirs, _ := liveJob(t, svc, "tok_a")
	mine, _ := liveJob(t, svc, "tok_b")
	_, missing := svc.Wait(context.Background(), "tok_b", WaitRequest{ProcessIDs: []string{uuid.NewString()}, TimeoutMS: ms(0)}, nil)
	_, hidden := svc.Wait(context.Background(), "tok_b", WaitRequest{ProcessIDs: []string{mine, theirs}, TimeoutMS: ms(0)}, nil)
	if !errcode.Is(hidden, errcode.NotFound) || missing == nil || hidden.Error() != missing.Error() {
		t.Fatalf("another principal's job: %v; a job that does not exist: %v", hidden, missing)
	}
	res, err := svc.Wait(context.Background(), principal.Local, WaitRequest{ProcessIDs: []string{mine, theirs}, TimeoutMS: ms(0)}, nil)
	if err != nil || strings.Join(res.Pending, ",") != mine+","+theirs {
		t.Fatalf("the owner's wait: %+v %v", res, err)
	}
}

// TestWaitSeesEveryKindOfEnd: a published terminal record, its
// supervisor gone, ends the wait (mode any, the other job pending), and so
// does a supervisor that vanished without publishing one (mode all).
func TestWaitSeesEveryKindOfEnd(t *testing.T) {
	svc := service(t, "/nonexistent")
	a, supA := liveJob(t, svc, "")
	b, supB := liveJob(t, svc, "")
	go func() {
		time.Sleep(200 * time.Millisecond)
		res := &jobmeta.Result{Schema: 1, CompletedAt: time.Now().UTC(), ExitCode: new(int)}
		atomicfile.WriteJSON(filepath.Join(svc.store.Dir(a), jobmeta.ResultFile), res)
		supA.Process.Kill()
	}()
	res, err := svc.Wait(context.Background(), principal.Local, WaitRequest{ProcessIDs: []string{a, b}, TimeoutMS: ms(20000)}, nil)
	if err != nil || len(res.Ended) != 1 || res.Ended[0].ProcessID != a || res.Ended[0].State != jobmeta.Exited ||
		strings.Join(res.Pending, ",") != b || res.Met != MetEnded {
		t.Fatalf("mode any: %+v %v", res, err)
	}
	supB.Process.Kill()
	supB.Wait()
	res, err = svc.Wait(context.Background(), principal.Local, WaitRequest{ProcessIDs: []string{a, b}, Mode: WaitAll, TimeoutMS: ms(20000)}, nil)
	if err != nil || len(res.Ended) != 2 || res.Ended[1].ProcessID != b || !res.Ended[1].Terminal || len(res.Pending) != 0 || res.Met != MetEnded {
		t.Fatalf("mode all after a supervisor vanished: %+v %v", res, err)
	}
}

// TestWaitEndsWithItsContext: a cancelled wait returns at once with what
// it saw, long before its timeout.
func TestWaitEndsWithItsContext(t *testing.T) {
	svc := service(t, "/nonexistent")
	id, _ := liveJob(t, svc, "")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	began := time.Now()
	res, err := svc.Wait(ctx, principal.Local, WaitRequest{ProcessIDs: []string{id}, TimeoutMS: ms(600000)}, nil)
	if err != nil || len(res.Pending) != 1 || res.Met != MetTimeout {
		t.Fatalf("cancelled wait: %+v %v", res, err)
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Fatalf("a cancelled wait returned after %v", d)
	}
}
