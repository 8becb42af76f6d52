package testkit

import (
	"testing"
	"time"
)

// EventuallyTick is how often Eventually looks again.
const EventuallyTick = 10 * time.Millisecond

// Eventually calls check until it returns nil, every EventuallyTick, and
// fails tb with check's last error once within has passed: the message
// says what was last seen, not only that time ran out.
func Eventually(tb testing.TB, within time.Duration, check func() error) {
	tb.Helper()
	if err := Poll(within, check); err != nil {
		tb.Fatalf("after %s: %v", within, err)
	}
}

// Poll calls check until it returns nil, every EventuallyTick, and
// returns check's last error once within has passed.
func Poll(within time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(EventuallyTick)
	}
}
