// Package exitstatus says how a process ended, the one way the job
// records and process.run's results say it: a signal's name, or the exit
// code when no signal ended it.
package exitstatus

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Of returns the exit code of a process that exited, or the name of the
// signal that killed it ("SIGKILL"; "signal 40" for one without a name).
// Exactly one of the two is set.
func Of(ps *os.ProcessState) (code *int, signal string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		if signal = unix.SignalName(ws.Signal()); signal == "" {
			signal = fmt.Sprintf("signal %d", int(ws.Signal()))
		}
		return nil, signal
	}
	c := ps.ExitCode()
	return &c, ""
}
