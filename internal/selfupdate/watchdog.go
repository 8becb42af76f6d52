package selfupdate

import (
	"context"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
)

// Watch is one update's watchdog: it runs from the previous binary.
type Watch struct {
	// Service is the agent's unit, Exe the binary it runs.
	Service, Exe string
	// StateDir is the agent's: the link note and the update record.
	StateDir string
	// From and To are the versions the update goes between.
	From, To string
	// Wait is how long the new agent has to link; zero means
	// limits.UpdateLinkWait.
	Wait time.Duration
	// Poll is how often the link note is read; zero means 200 ms.
	Poll time.Duration
}

// NewAgentLinked reports whether l says the agent of version to linked at or after
// since: the new agent, not one that linked before the update.
func NewAgentLinked(l Linked, to string, since time.Time) bool {
	return l.Version == to && !l.At.Before(since)
}

// Run restarts the service and waits for its new agent to link. If it
// does not in time, Run puts the previous binary back and restarts the
// service again. It returns the update's end state, which it records.
func (w Watch) Run(ctx context.Context) string {
	wait, poll := w.Wait, w.Poll
	if wait == 0 {
		wait = limits.UpdateLinkWait
	}
	if poll == 0 {
		poll = 200 * time.Millisecond
	}
	since := time.Now().UTC()
	rec := Record{From: w.From, To: w.To, State: StateStarted, StartedAt: since}
	if r, err := ReadRecord(w.StateDir); err == nil && r != nil && r.To == w.To && r.State == StateStarted {
		rec.StartedAt = r.StartedAt
	}
	// The restart's job ends when the new agent is ready, or failed: the
	// link note is what decides.
	restart(ctx, w.Service, false)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	state := StateRolledBack
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case <-deadline.C:
			break wait
		case <-tick.C:
			if l, err := readLinked(w.StateDir); err == nil && NewAgentLinked(l, w.To, since) {
				state = StateDone
				break wait
			}
		}
	}
	if state != StateDone {
		if err := Restore(w.Exe); err != nil {
			state = StateRollbackFailed
		} else {
			restart(context.WithoutCancel(ctx), w.Service, true)
		}
	}
	end := time.Now().UTC()
	rec.State, rec.EndedAt = state, &end
	WriteRecord(w.StateDir, rec)
	return state
}
