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
	EventuallyEvery(tb, within, EventuallyTick, check)
}

// EventuallyEvery is Eventually looking every tick: for a check that
// costs a process or more, which looking every 10 ms would multiply.
func EventuallyEvery(tb testing.TB, within, tick time.Duration, check func() error) {
	tb.Helper()
	if err := PollEvery(within, tick, check); err != nil {
		tb.Fatalf("after %s: %v", within, err)
	}
}

// Poll calls check until it returns nil, every EventuallyTick, and
// returns check's last error once within has passed.
func Poll(within time.Duration, check func() error) error {
	return PollEvery(within, EventuallyTick, check)
}

// PollEvery is Poll looking every tick.
func PollEvery(within, tick time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(tick)
	}
}
