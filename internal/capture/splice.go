package capture

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Pipe returns a pipe for a stream to capture, both ends close-on-exec. It
// is os.Pipe without O_NONBLOCK: os.NewFile keeps a blocking descriptor off
// the netpoller, so Drain sleeps in splice(2) or read(2) as cat does, rather
// than going EAGAIN, epoll, reschedule after every read. Closing such a file
// while Drain waits on it defers the close(2) until that call returns, so
// the descriptor is never reused beneath it.
func Pipe() (r, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("capture: pipe: %w", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// splicePipe drains the pipe r into w with splice(2): the kernel moves the
// bytes from the pipe into the capture file, with no copy through user
// space. Each splice stores at most what the slack leaves past the published
// end, and runs holding w.prod but not w.mu, so a blocked splice delays no
// header, Meta, Seal or Close. A splice that completes after Seal or Close
// counts nothing; the bytes it stored lie past the final header, in the
// slack. done is false, with nothing consumed, when r cannot be spliced into
// the file or the disk failed: Drain then goes on copying (and counting).
func (w *Writer) splicePipe(r *os.File) (done bool, err error) {
	rc, err := r.SyscallConn()
	if err != nil {
		return false, nil
	}
	// The file's descriptor is held across each splice, so a concurrent
	// Close defers its close(2) until the splice returns.
	wc, err := w.f.SyscallConn()
	if err != nil {
		return false, nil
	}
	var (
		pipeFD      uintptr
		off         int64
		k           int
		n           int64
		serr, ioerr error
	)
	toFile := func(wfd uintptr) { n, serr = w.splice(int(pipeFD), nil, int(wfd), &off, k, 0) }
	fromPipe := func(rfd uintptr) bool {
		pipeFD = rfd
		if ioerr = wc.Control(toFile); ioerr != nil {
			return true
		}
		// A pipe left non-blocking waits for data on the netpoller.
		return !errors.Is(serr, unix.EAGAIN)
	}
	for {
		w.prod.Lock()
		w.mu.Lock()
		if err := w.reserveSplice(&off, &k); err != nil || k == 0 {
			w.mu.Unlock()
			w.prod.Unlock()
			return err != nil, err
		}
		w.mu.Unlock()

		n, serr, ioerr = 0, nil, nil
		rerr := rc.Read(fromPipe)
		now := time.Now()

		w.mu.Lock()
		finished := w.sealed || w.closed
		if !finished && n > 0 {
			w.h.observed += n
			w.h.stored += n
			w.h.lastNano = now.UnixNano()
			w.unpublished = true
			w.pace(now)
		}
		w.mu.Unlock()
		w.prod.Unlock()

		switch {
		case finished:
			return true, errWriterDone
		case rerr != nil:
			return true, rerr
		case ioerr != nil:
			return true, ioerr
		case errors.Is(serr, unix.EINTR):
		case errors.Is(serr, unix.EINVAL):
			// Not a pipe, or a file system without splice: copy instead.
			return false, nil
		case serr != nil:
			// Nothing was consumed from the pipe; Drain counts the rest
			// without storing it.
			w.mu.Lock()
			w.h.flags |= flagWriteError
			w.mu.Unlock()
			return false, nil
		case n == 0:
			return true, nil // EOF
		}
	}
}

// reserveSplice sets *off and *k to where the next splice stores and how
// much it may, publishing first if the slack is used up. *k is 0 when
// nothing may be stored any more (a write error). The caller holds w.prod
// and w.mu.
func (w *Writer) reserveSplice(off *int64, k *int) error {
	if w.sealed || w.closed {
		return errWriterDone
	}
	*k = 0
	if w.h.flags&flagWriteError != 0 {
		return nil
	}
	room := w.published + slackBytes - w.h.stored
	if room <= 0 {
		if w.publish() != nil {
			return nil
		}
		room = slackBytes
	}
	*off, *k = locate(w.h.stored, int(room))
	return nil
}
