package jobs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/launcher"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/testkit"
)

// realService is a Service that launches the real supervisor (this test
// binary) on the user manager.
func realService(t *testing.T) *Service {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return service(t, exe)
}

// sibling is another Service on svc's state directory, as a second agent
// process (or `commandcore mcp`) beside it would be.
func sibling(t *testing.T, svc *Service) *Service {
	t.Helper()
	store, err := jobstore.Open(svc.stateDir, procid.Default())
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l := launcher.New(exe, false)
	t.Cleanup(l.Close)
	askUnits(store, l, svc.deviceID)
	sib := &Service{store: store, launcher: l, procs: svc.procs, stateDir: svc.stateDir, deviceID: svc.deviceID,
		shell: svc.shell, baseEnv: svc.baseEnv, claimTimeout: svc.claimTimeout}
	t.Cleanup(sib.recording.Wait)
	return sib
}

// stopAll stops every job of svc when the test ends.
func stopAll(t *testing.T, svc *Service) {
	t.Cleanup(func() {
		recs, _ := svc.List(principal.Local)
		for _, r := range recs {
			svc.Stop(principal.Local, r.ProcessID)
		}
		for _, r := range recs {
			svc.awaitTerminal(context.Background(), r.ProcessID, 10*time.Second)
		}
	})
}

const alice, bob = principal.Principal("tok_alice0000000"), principal.Principal("tok_bob000000000")

func TestIdempotencyKeyStartsOnce(t *testing.T) {
	svc := realService(t)
	stopAll(t, svc)
	req := StartRequest{Command: "exec sleep 30", Name: "first", Env: map[string]string{"A": "1"}, IdempotencyKey: "build-42"}
	first, err := svc.Start(context.Background(), alice, req)
	if err != nil {
		t.Fatal(err)
	}
	if first.Reused || first.State != jobmeta.Running {
		t.Fatalf("first start: reused %v state %s, want a new running job", first.Reused, first.State)
	}
	// The name is a label, not part of what runs; wait_ms applies to the
	// repeat's answer.
	again := req
	again.Name, again.WaitMS = "renamed", 50
	second, err := svc.Start(context.Background(), alice, again)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Reused || second.ProcessID != first.ProcessID || second.State != jobmeta.Running {
		t.Fatalf("repeat: %+v, want job %s reused and running", second, first.ProcessID)
	}
	// A new agent process on the same state finds the key on disk.
	restarted := sibling(t, svc)
	third, err := restarted.Start(context.Background(), alice, req)
	if err != nil || !third.Reused || third.ProcessID != first.ProcessID {
		t.Fatalf("after a restart: %+v, %v; want job %s reused", third, err, first.ProcessID)
	}
	// Keys are per principal.
	bobs, err := svc.Start(context.Background(), bob, req)
	if err != nil || bobs.Reused || bobs.ProcessID == first.ProcessID {
		t.Fatalf("bob's same key: %+v, %v; want a job of his own", bobs, err)
	}
	// job.json holds digests, never the key or the command.
	raw, err := os.ReadFile(filepath.Join(svc.store.Dir(first.ProcessID), jobmeta.JobFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"build-42", "sleep"} {
		if strings.Contains(string(raw), secret) {
			t.Fatalf("job.json holds %q: %s", secret, raw)
		}
	}
	if !strings.Contains(string(raw), keyDigest("build-42")) {
		t.Fatalf("job.json lacks the key's digest: %s", raw)
	}
	// Once the job is forgotten, its key starts a new one.
	if _, err := svc.Stop(alice, first.ProcessID); err != nil {
		t.Fatal(err)
	}
	if rec, _ := svc.awaitTerminal(context.Background(), first.ProcessID, 10*time.Second); !rec.Terminal {
		t.Fatalf("the stopped job is %s", rec.State)
	}
	if _, err := svc.Forget(alice, first.ProcessID); err != nil {
		t.Fatal(err)
	}
	fresh, err := svc.Start(context.Background(), alice, req)
	if err != nil || fresh.Reused || fresh.ProcessID == first.ProcessID {
		t.Fatalf("the key after forget: %+v, %v; want a new job", fresh, err)
	}
}

// TestIdempotencyKeyConflicts: the key with any field that decides what
// runs changed is a conflict naming the job, and launches nothing.
func TestIdempotencyKeyConflicts(t *testing.T) {
	svc := realService(t)
	stopAll(t, svc)
	base := StartRequest{Command: "exec sleep 30", Cwd: "/tmp", Env: map[string]string{"A": "1"}, TimeoutS: 60, Stdin: true, IdempotencyKey: "k"}
	first, err := svc.Start(context.Background(), alice, base)
	if err != nil {
		t.Fatal(err)
	}
	for field, edit := range map[string]func(*StartRequest){
		"command":   func(r *StartRequest) { r.Command = "exec sleep 31" },
		"cwd":       func(r *StartRequest) { r.Cwd = "/" },
		"env":       func(r *StartRequest) { r.Env = map[string]string{"A": "2"} },
		"no env":    func(r *StartRequest) { r.Env = nil },
		"timeout_s": func(r *StartRequest) { r.TimeoutS = 61 },
		"stdin":     func(r *StartRequest) { r.Stdin = false },
		"pty":       func(r *StartRequest) { r.PTY = &TerminalSize{Cols: 80, Rows: 24} },
	} {
		req := base
		edit(&req)
		_, err := svc.Start(context.Background(), alice, req)
		if !errcode.Is(err, errcode.Conflict) || !strings.Contains(err.Error(), first.ProcessID) {
			t.Errorf("%s changed: %v, want conflict naming %s", field, err, first.ProcessID)
		}
	}
	if recs, _ := svc.List(principal.Local); len(recs) != 1 {
		t.Fatalf("%d jobs, want the first only", len(recs))
	}
}

// TestIdempotencyKeyConcurrentStarts: 20 starts with one key at once,
// split over two Services on one state directory (two agent processes),
// launch one job and all answer with it.
func TestIdempotencyKeyConcurrentStarts(t *testing.T) {
	svc := realService(t)
	other := sibling(t, svc)
	stopAll(t, svc)
	req := StartRequest{Command: "exec sleep 30", IdempotencyKey: "once"}
	var wg sync.WaitGroup
	ids := make([]string, 20)
	reused := make([]bool, 20)
	errs := make([]error, 20)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := svc
			if i%2 == 1 {
				s = other
			}
			res, err := s.Start(context.Background(), alice, req)
			if errs[i] = err; err == nil {
				ids[i], reused[i] = res.ProcessID, res.Reused
			}
		}()
	}
	wg.Wait()
	fresh := 0
	for i := range ids {
		if errs[i] != nil {
			t.Fatalf("start %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("start %d answered job %s, start 0 job %s", i, ids[i], ids[0])
		}
		if !reused[i] {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d starts say they launched, want 1", fresh)
	}
	if recs, _ := svc.List(principal.Local); len(recs) != 1 {
		t.Fatalf("%d jobs on disk, want 1", len(recs))
	}
}

// TestIdempotencyKeyFailedLaunchIsTheAnswer: a keyed start whose launch
// failed is not launched again by its repeat: the repeat reports the
// failed job, and a new key is how to try again.
func TestIdempotencyKeyFailedLaunchIsTheAnswer(t *testing.T) {
	svc := service(t, script(t, "exit 3"))
	req := StartRequest{Command: "true", IdempotencyKey: "fails"}
	first, err := svc.Start(context.Background(), alice, req)
	if err != nil || first.State != jobmeta.LaunchFailed {
		t.Fatalf("first: %+v, %v; want launch_failed", first, err)
	}
	resetLeftovers(t, &first.Unit)
	second, err := svc.Start(context.Background(), alice, req)
	if err != nil || !second.Reused || second.ProcessID != first.ProcessID || second.State != jobmeta.LaunchFailed {
		t.Fatalf("repeat: %+v, %v; want the failed job reused", second, err)
	}
}

func TestIdempotencyKeyBounds(t *testing.T) {
	svc := service(t, "/nonexistent")
	for key, ok := range map[string]bool{
		strings.Repeat("k", 128):     true,
		" ~":                         true,
		strings.Repeat("k", 129):     false,
		"tab\there":                  false,
		"new\nline":                  false,
		"del\x7f":                    false,
		"caf\u00e9":                  false,
		"nul\x00":                    false,
		"\x1f":                       false,
		"550e8400-e29b-41d4-a716-44": true,
	} {
		_, err := svc.Start(context.Background(), alice, StartRequest{Command: "true", Cwd: "relative", IdempotencyKey: key})
		// A valid key passes to the request's next check, the cwd.
		if ok && (!errcode.Is(err, errcode.InvalidArgument) || strings.Contains(err.Error(), "idempotency_key")) {
			t.Errorf("key %q: %v, want it accepted (and the relative cwd refused)", key, err)
		}
		if !ok && (!errcode.Is(err, errcode.InvalidArgument) || !strings.Contains(err.Error(), "idempotency_key")) {
			t.Errorf("key %q: %v, want invalid_argument naming idempotency_key", key, err)
		}
	}
}

// TestKeyLocksFreeTheirEntries: a key's lock is dropped once its last
// user releases it, so the table holds only keys in use.
func TestKeyLocksFreeTheirEntries(t *testing.T) {
	var l keyLocks
	release := l.lock("a")
	done := make(chan struct{})
	go func() { l.lock("a")(); close(done) }()
	testkit.Eventually(t, 5*time.Second, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.locks["a"].users != 2 {
			return errcode.New(errcode.Internal, "the second user is not waiting yet")
		}
		return nil
	})
	select {
	case <-done:
		t.Fatal("the second lock was taken while the first was held")
	default:
	}
	release()
	<-done
	if len(l.locks) != 0 {
		t.Fatalf("%d locks left, want none", len(l.locks))
	}
}
