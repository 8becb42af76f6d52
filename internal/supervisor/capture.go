package supervisor

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/capture"
	"github.com/commandcore/commandcore/internal/secretmask"
	"github.com/commandcore/commandcore/internal/terminal"
)

// captureGrace is how long capture keeps draining after the shell exits, for
// descendants that still hold its pipes. After it the capture is finalised
// as incomplete; the unit's cleanup ends such descendants.
const captureGrace = time.Second

// pipeSize is the capacity asked for the job's output pipes: four of the
// capture's pieces (capture.Drain takes at most the ring's 64 KiB slack at a
// time). Larger than the default 64 KiB, so that a producer of small writes
// (head's 8 KiB) runs ahead while the supervisor is descheduled; far smaller
// than the 1 MiB an unprivileged process may set, because a producer of big
// writes (dd's 1 MiB) holds the pipe's lock while it fills whatever room
// there is, and the supervisor's next piece spins on that lock
// (BENCHMARKS.md, capture at pipe speed).
const pipeSize = 256 << 10

// outputs are the shell's stdout and stderr pipes, captured into the
// job's capture files.
type outputs struct {
	r, w [2]*os.File
	// src is what each stream is read through.
	src  [2]io.Reader
	done [2]<-chan error
}

func openOutputs() (*outputs, error) {
	o := &outputs{}
	var err error
	if o.r[0], o.w[0], err = capture.Pipe(); err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	if o.r[1], o.w[1], err = capture.Pipe(); err != nil {
		o.closeWriters()
		o.closeReaders()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	o.src = [2]io.Reader{o.r[0], o.r[1]}
	return o, nil
}

// terminalOutputs captures a terminal's master as stdout. The shell gets
// no stderr pipe of its own (the terminal is its stderr), so that stream
// ends empty as soon as our copy of its write end is closed.
func terminalOutputs(master *os.File) (*outputs, error) {
	o := &outputs{}
	var err error
	if o.r[1], o.w[1], err = capture.Pipe(); err != nil {
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	o.r[0] = master
	o.src = [2]io.Reader{terminal.Reader{Master: master}, o.r[1]}
	return o, nil
}

// mask reads both streams through secrets, so that what the job prints of
// its secret input is masked before the capture stores it. The pipes are
// then read into memory rather than spliced into the capture files.
func (o *outputs) mask(secrets *secretmask.Set) {
	for i, r := range o.src {
		o.src[i] = secrets.Reader(r)
	}
}

// closeWriters closes our copies of the write ends once the shell has its
// own (or never will).
func (o *outputs) closeWriters() {
	for _, w := range o.w {
		if w != nil {
			w.Close()
		}
	}
}

// closeReaders gives up the pipes of a shell that never started.
func (o *outputs) closeReaders() {
	for _, r := range o.r {
		if r != nil {
			r.Close()
		}
	}
}

// drain captures both streams into ws until their EOF.
func (o *outputs) drain(ws [2]*capture.Writer) {
	for i := range o.r {
		// Failure only costs throughput.
		growPipe(o.r[i])
		o.done[i] = drain(ws[i], o.src[i])
	}
}

// finish waits for both streams' EOF, together for at most captureGrace.
func (o *outputs) finish(ws [2]*capture.Writer) {
	graceEnd := time.Now().Add(captureGrace)
	for i := range o.r {
		finishCapture(o.r[i], o.done[i], ws[i], graceEnd)
	}
}

// growPipe asks for a larger pipe buffer. It goes through SyscallConn:
// File.Fd would switch a terminal's master, which stays on the netpoller,
// to blocking mode.
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
	}
}

func drain(w *capture.Writer, r io.Reader) <-chan error {
	done := make(chan error, 1)
	go func() { done <- capture.Drain(w, r) }()
	return done
}

// finishCapture waits for the stream's EOF until grace ends, then seals it
// (EOF reached) or finalises it as incomplete.
func finishCapture(r *os.File, done <-chan error, w *capture.Writer, graceEnd time.Time) {
	t := time.NewTimer(time.Until(graceEnd))
	defer t.Stop()
	select {
	case err := <-done:
		r.Close()
		if err == nil {
			w.Seal()
		}
		return
	case <-t.C:
	}
	// Descendants still hold the pipe, and a blocking read cannot be
	// interrupted: Close publishes what was counted and makes the drain
	// refuse anything its read returns later, so the result published from
	// w.Meta is final. The read ends when the descendants do or when this
	// process exits.
	w.Close()
	r.Close()
}
