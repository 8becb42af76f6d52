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
}

// await carries out a stop request until the shell exits, then stops what
// is left of its group and reaps the shell.
func (s *sup) await(proc *os.Process, group *procgroup.Group, sigs <-chan os.Signal) (ending, error) {
	exited := make(chan time.Time, 1)
	go func() {
		procgroup.AwaitExit(proc.Pid)
		exited <- time.Now().UTC()
	}()

	var e ending
	var stop *procgroup.Stopper
loop:
	for {
		select {
		case <-sigs:
			if stop != nil {
				continue
			}
			e.stopRequested = s.stopRecorded()
			// A SIGTERM without stop.json comes from the service manager
			// itself (a shutdown, say): carried out the same way, and
			// recorded as such so the end can be classified honestly.
			e.byManager = !e.stopRequested
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
			e.stopRequested = s.stopRecorded()
			e.byManager = !e.stopRequested
		case <-time.After(managerSignalGrace):
		}
	}
	return e, nil
}

// stopRecorded reports whether a client asked for the stop (stop.json).
func (s *sup) stopRecorded() bool {
	_, err := os.Stat(s.path(jobmeta.StopFile))
	return err == nil
}
