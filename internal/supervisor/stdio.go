package supervisor

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/envelope"
	"github.com/commandcore/commandcore/internal/terminal"
)

// stdio is the shell's standard descriptors and our ends of them: /dev/null
// or a pipe as stdin and pipes as stdout and stderr, or a terminal as all
// three.
type stdio struct {
	child [3]*os.File
	// input is where the job's input goes (a stdin pipe's write end or the
	// terminal's master); nil when stdin is /dev/null.
	input *os.File
	out   *outputs
	pty   bool
}

func openStdio(env *envelope.Envelope) (*stdio, error) {
	if env.PTY != nil {
		master, slave, err := terminal.Open(*env.PTY)
		if err != nil {
			return nil, fmt.Errorf("open terminal: %w", err)
		}
		out, err := terminalOutputs(master)
		if err != nil {
			master.Close()
			slave.Close()
			return nil, err
		}
		return &stdio{child: [3]*os.File{slave, slave, slave}, input: master, out: out, pty: true}, nil
	}
	out, err := openOutputs()
	if err != nil {
		return nil, err
	}
	st := &stdio{out: out}
	if env.Stdin {
		st.child[0], st.input, err = os.Pipe()
	} else {
		st.child[0], err = os.Open(os.DevNull)
	}
	if err != nil {
		out.closeWriters()
		out.closeReaders()
		return nil, fmt.Errorf("stdin: %w", err)
	}
	st.child[1], st.child[2] = out.w[0], out.w[1]
	return st, nil
}

// procAttr puts the shell in its own process group, or, on a terminal, in
// its own session with the terminal as its controlling terminal (a
// session leader leads its process group too, so stops reach it alike).
func (st *stdio) procAttr() *unix.SysProcAttr {
	if st.pty {
		return &unix.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	return &unix.SysProcAttr{Setpgid: true}
}

// closeChildEnds closes our copies of the shell's descriptors once it has
// its own (or never will).
func (st *stdio) closeChildEnds() {
	st.child[0].Close()
	st.out.closeWriters()
}

// closeAll gives up every descriptor of a shell that never started.
func (st *stdio) closeAll() {
	st.closeChildEnds()
	st.out.closeReaders()
	if st.input != nil && !st.pty {
		st.input.Close()
	}
}
