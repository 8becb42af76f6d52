package testkit

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestPollReturnsOnceTheCheckHolds(t *testing.T) {
	n := 0
	err := Poll(5*time.Second, func() error {
		if n++; n < 3 {
			return fmt.Errorf("seen %d", n)
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("Poll = %v after %d checks, want nil after 3", err, n)
	}
}

func TestPollGivesTheLastObservationWhenTimeRunsOut(t *testing.T) {
	n := 0
	began := time.Now()
	err := Poll(50*time.Millisecond, func() error { n++; return fmt.Errorf("seen %d", n) })
	if err == nil || err.Error() != fmt.Sprintf("seen %d", n) {
		t.Fatalf("Poll = %v, want the last check's error (check %d)", err, n)
	}
	if n < 2 || time.Since(began) < 50*time.Millisecond {
		t.Fatalf("Poll gave up after %d checks and %s, before its 50ms", n, time.Since(began))
	}
}

func TestPollChecksOnceWithoutTime(t *testing.T) {
	n := 0
	want := errors.New("not yet")
	if err := Poll(0, func() error { n++; return want }); err != want || n != 1 {
		t.Fatalf("Poll(0) = %v after %d checks, want one check", err, n)
	}
}

type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

func TestEventuallyFailsWithWhatItLastSaw(t *testing.T) {
	r := &fatalRecorder{TB: t}
	Eventually(r, 20*time.Millisecond, func() error { return errors.New("state running, want exited") })
	if r.msg != "after 20ms: state running, want exited" {
		t.Fatalf("failure message %q", r.msg)
	}
	r.msg = ""
	Eventually(r, time.Second, func() error { return nil })
	if r.msg != "" {
		t.Fatalf("a check that holds failed the test: %q", r.msg)
	}
}

func TestPollEveryKeepsItsPace(t *testing.T) {
	n := 0
	began := time.Now()
	PollEvery(250*time.Millisecond, 100*time.Millisecond, func() error { n++; return errors.New("no") })
	if n < 2 || n > 4 || time.Since(began) < 250*time.Millisecond {
		t.Fatalf("%d checks in %s at a 100ms pace over 250ms, want 3 or 4", n, time.Since(began))
	}
}
