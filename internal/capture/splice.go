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

// splicePipe drains the pipe r into w with no user-space buffer: splice(2)
// moves the bytes into the file until the ring has been stored
// once (the file then has its final size), and from then on read(2) copies
// them straight into a shared mapping of the ring (ringMap), which spares
// the file system's write path for every piece. Each piece stores at most
// what the slack leaves past the published end, and is moved holding w.prod
// but not w.mu, so a blocked splice or read delays no header, Meta, Seal or
// Close. A piece that completes after Seal or Close counts nothing; the
// bytes it stored lie past the final header, in the slack. done is false,
// with nothing consumed, when r cannot be spliced into the file or the disk
// failed: Drain then goes on copying (and counting).
func (w *Writer) splicePipe(r *os.File) (done bool, err error) {
	rc, err := r.SyscallConn()
	if err != nil {
		return false, nil
	}
	wc, err := w.f.SyscallConn()
	if err != nil {
		return false, nil
	}
	var ring ringMap
	defer ring.unmap()
	// Both descriptors are held for the whole loop, so a concurrent Close
	// of either defers its close(2) until the loop returns; the mapping,
	// unmapped only then, outlives a Close too.
	var rerr error
	cerr := wc.Control(func(wfd uintptr) {
		rerr = rc.Read(func(rfd uintptr) bool {
			var again bool
			done, again, err = w.pump(int(rfd), int(wfd), &ring)
			// A pipe left non-blocking waits for data on the netpoller.
			return !again
		})
	})
	if cerr != nil {
		return true, cerr
	}
	if rerr != nil {
		return true, rerr
	}
	return done, err
}

// pump moves pipe rfd into file wfd piece by piece until EOF, an error, or
// the end of w; again reports an empty non-blocking pipe.
func (w *Writer) pump(rfd, wfd int, ring *ringMap) (done, again bool, err error) {
	// Declared once: splice takes off's address, which moves it to the heap.
	var (
		off  int64
		k    int
		rerr error
	)
	for {
		w.prod.Lock()
		w.mu.Lock()
		off, k, rerr = w.reserve()
		if rerr != nil || k == 0 {
			w.mu.Unlock()
			w.prod.Unlock()
			return rerr != nil, false, rerr
		}
		if !ring.tried && w.h.stored >= headBytes+ringBytes {
			ring.mapRing(wfd)
		}
		w.mu.Unlock()

		var n int64
		var merr error
		if ring.mem != nil {
			var m int
			m, merr = w.read(rfd, ring.slot(off, k))
			n = int64(max(m, 0))
		} else {
			n, merr = w.splice(rfd, nil, wfd, &off, k, 0)
		}
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
			return true, false, errWriterDone
		case errors.Is(merr, unix.EINTR):
		case errors.Is(merr, unix.EAGAIN):
			return false, true, nil
		case errors.Is(merr, unix.EINVAL) && ring.mem == nil:
			// Not a pipe, or a file system without splice: copy instead.
			return false, false, nil
		case merr != nil:
			// Nothing was consumed from the pipe (a read into the mapping
			// that cannot fault its page in, on a full disk or after an
			// I/O error, fails with EFAULT before taking any byte); Drain
			// counts the rest without storing it.
			w.mu.Lock()
			w.h.flags |= flagWriteError
			w.mu.Unlock()
			return false, false, nil
		case n == 0:
			return true, false, nil // EOF
		}
	}
}

// reserve returns where the next piece is stored and how much it may
// hold, publishing first if the slack is used up; k is 0 when nothing may
// be stored any more (a write error). The caller holds w.prod and w.mu.
//
// Nothing is skipped, though most of a fast stream is overwritten in the
// ring before it ends and a full pipe shows how much will be: a header may
// only be published over a tail window that is wholly on disk, and until
// then stores must stay within the slack, where they touch no slot of the
// window that readers of the last header (and a crash) rely on. A skipped
// range would lie inside the tail window of every header published before
// a full tail (512 KiB) after it is stored, and the slack (64 KiB) is all
// the writer may store unpublished.
func (w *Writer) reserve() (off int64, k int, err error) {
	if w.sealed || w.closed {
		return 0, 0, errWriterDone
	}
	if w.h.flags&flagWriteError != 0 {
		return 0, 0, nil
	}
	room := w.published + slackBytes - w.h.stored
	if room <= 0 {
		if w.publish() != nil {
			return 0, 0, nil
		}
		room = slackBytes
	}
	off, k = locate(w.h.stored, int(room))
	return off, k, nil
}

// ringMap is a shared, writable mapping of the file's ring. The kernel
// alone writes through it, in read(2), where a page that cannot be made
// writable (disk full, I/O error) fails the read with EFAULT instead of
// raising SIGBUS. Readers see the bytes as soon as read returns, as with
// any write: it is the same page cache. The header's pwrite orders its
// bytes after them, as after a splice: it takes its page with a fully
// ordered atomic before copying.
type ringMap struct {
	mem   []byte
	start int64 // file offset of mem[0]: ringOffset rounded down to a page
	tried bool
}

// mapRing maps the ring of file wfd once it holds the whole ring; if that
// fails, the pipe goes on being spliced.
func (m *ringMap) mapRing(wfd int) {
	m.tried = true
	m.start = ringOffset &^ int64(os.Getpagesize()-1)
	mem, err := unix.Mmap(wfd, m.start, int(ringOffset+ringBytes-m.start), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err == nil {
		m.mem = mem
	}
}

// slot returns the k bytes of the mapping at file offset off.
func (m *ringMap) slot(off int64, k int) []byte {
	i := off - m.start
	return m.mem[i : i+int64(k) : i+int64(k)]
}

func (m *ringMap) unmap() {
	if m.mem != nil {
		unix.Munmap(m.mem)
		m.mem = nil
	}
}
