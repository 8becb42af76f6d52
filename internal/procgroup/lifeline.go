package procgroup

import (
	"os"

	"golang.org/x/sys/unix"
)

// Lifeline is a process in a group that kills the group when the process
// that started it ends without releasing it, even killed outright:
// Pdeathsig ends the leader, not what the leader started.
type Lifeline struct {
	w    *os.File
	proc *os.Process
}

// lifelineScript reads until it is released (a line) or its starter is
// gone (EOF, the pipe's only writer ended); then it kills its own group.
const lifelineScript = "read -r line || kill -KILL 0"

// StartLifeline starts a lifeline in the group pgid, run by the absolute
// path shell.
func StartLifeline(shell string, pgid int) (*Lifeline, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		w.Close()
		return nil, err
	}
	defer devnull.Close()
	// An empty environment: no BASH_ENV or ENV runs anything in it.
	proc, err := os.StartProcess(shell, []string{shell, "-c", lifelineScript}, &os.ProcAttr{
		Dir:   "/",
		Env:   []string{},
		Files: []*os.File{r, devnull, devnull},
		Sys:   &unix.SysProcAttr{Setpgid: true, Pgid: pgid},
	})
	if err != nil {
		w.Close()
		return nil, err
	}
	return &Lifeline{w: w, proc: proc}, nil
}

// Release lets the lifeline exit without killing anything (unless a stop
// ended it already) and reaps it.
func (l *Lifeline) Release() {
	l.w.Write([]byte("\n"))
	l.w.Close()
	l.proc.Wait()
}
