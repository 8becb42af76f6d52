package supervisor

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/procgroup"
)

// managerSignalGrace is how long a child killed by SIGTERM waits for the
// supervisor's own SIGTERM, sent by the service manager at the same time.
const managerSignalGrace = 200 * time.Millisecond

// ending is how the shell ended and who asked it to.
type ending struct {
	status        *os.ProcessState
	completedAt   time.Time
	stopRequested bool
	byManager     bool
	timedOut      bool
}

// await carries out a stop request, or the time limit's stop at deadline
// (none when zero), until the shell exits, then stops what is left of its
// group and reaps the shell. Whichever stop comes first is the one
// recorded.
func (s *sup) await(proc *os.Process, group *procgroup.Group, sigs <-chan os.Signal, deadline time.Time) (ending, error) {
	exited := make(chan time.Time, 1)
	go func() {
		procgroup.AwaitExit(proc.Pid)
		exited <- time.Now().UTC()
	}()

	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}

	var e ending
	var stop *procgroup.Stopper
loop:
	for {
		select {
		case <-sigs:
			if stop != nil {
				continue
			}
			// A SIGTERM is carried out the same way whoever sent it, and
			// recorded so the end can be classified honestly.
			s.attribute(&e, deadline)
			stop = group.Stop(limits.StopEscalation)
		case <-expired:
			if stop != nil {
				continue
			}
			// Exactly an explicit stop, asked for by the time limit.
			e.timedOut = true
			stop = group.Stop(limits.StopEscalation)
		case e.completedAt = <-exited:
			break loop
		}
	}
	if stop != nil {
		stop.Wait()
	}
	st, err := proc.Wait()
	if err != nil {
		return e, fmt.Errorf("reap child: %w", err)
	}
	e.status = st
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && stop == nil && ws.Signaled() && ws.Signal() == unix.SIGTERM {
		// The service manager signals the whole unit at once, so the
		// child's death can be seen before our own SIGTERM is: wait for it
		// briefly, or the manager's stop would pass for an unexplained end.
		select {
		case <-sigs:
			s.attribute(&e, deadline)
		case <-time.After(managerSignalGrace):
		}
	}
	return e, nil
}

// attribute records who asked for the stop a SIGTERM carries: a client
// (stop.json), the time limit when it has passed (the unit's RuntimeMaxSec
// backstop reached a supervisor that was late), or else the service manager
// itself (a shutdown, say).
func (s *sup) attribute(e *ending, deadline time.Time) {
	switch {
	case s.stopRecorded():
		e.stopRequested = true
	case !deadline.IsZero() && !time.Now().Before(deadline):
		e.timedOut = true
	default:
		e.byManager = true
	}
}

// stopRecorded reports whether a client asked for the stop (stop.json).
func (s *sup) stopRecorded() bool {
	_, err := os.Stat(s.path(jobmeta.StopFile))
	return err == nil
}
