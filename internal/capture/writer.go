package capture

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/limits"
)

var errWriterDone = fmt.Errorf("capture: write after seal or close: %w", os.ErrClosed)

// Writer appends one stream to a capture file. It is safe for concurrent use,
// though a stream normally has a single producer (Drain); a Write waits for
// a piece of Drain's that is under way.
type Writer struct {
	// prod serialises producers. Drain holds it, and not mu, while the
	// kernel stores bytes past h.stored (a splice, or a read into the
	// ring's mapping).
	prod   sync.Mutex
	mu     sync.Mutex
	f      *os.File
	pwrite func(p []byte, off int64) (int, error) // f.WriteAt; a seam for fault tests
	// splice is unix.Splice and read unix.Read (into the ring's mapping);
	// seams for tests that fill the disk.
	splice func(rfd int, roff *int64, wfd int, woff *int64, n int, flags int) (int64, error)
	read   func(fd int, p []byte) (int, error)
	h      header
	buf    [fieldsLen]byte // header encoding, reused so Write does not allocate
	sealed bool
	closed bool

	// published is h.stored as of the last published header, and
	// unpublished says the counters moved since. Drain publishes lazily:
	// lastPublish paces it, and the quiet timer publishes the last bytes
	// of a stream that stops before the interval is up.
	published   int64
	unpublished bool
	lastPublish time.Time
	quiet       *time.Timer
	quietArmed  bool

	// fsyncFault, set by fault tests, simulates an fsync that fails.
	fsyncFault error
}

// Create creates a new capture file at path (mode 0600; it must not exist)
// and publishes an empty header.
func Create(path string) (*Writer, error) {
	// Read access too: Drain maps the ring (a shared mapping needs it).
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	w := &Writer{f: f, pwrite: f.WriteAt, splice: unix.Splice, read: unix.Read, lastPublish: time.Now()}
	// The whole header region is written once so the file is never shorter
	// than a header, even before the first output.
	region := make([]byte, headerSize)
	w.h.encode(region)
	if _, err := f.WriteAt(region, 0); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("capture: create %s: %w", path, err)
	}
	return w, nil
}

// Write captures p and publishes it before returning. Disk failures never
// reach the producer: the bytes are counted as observed but dropped, and
// Write still returns len(p), nil. It fails only after Seal or Close.
func (w *Writer) Write(p []byte) (int, error) {
	w.prod.Lock()
	defer w.prod.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sealed || w.closed {
		return 0, errWriterDone
	}
	w.append(p, time.Now())
	w.publish()
	return len(p), nil
}

// drainWrite captures p like Write but publishes at a bounded rate: at once
// if the last header is at least CapturePublishInterval old, otherwise when
// the quiet timer fires (or earlier, when the slack requires).
func (w *Writer) drainWrite(p []byte) error {
	w.prod.Lock()
	defer w.prod.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sealed || w.closed {
		return errWriterDone
	}
	now := time.Now()
	w.append(p, now)
	w.pace(now)
	return nil
}

// pace publishes unpublished counters if the last header is at least
// CapturePublishInterval old, and otherwise arms the quiet timer to publish
// them when it is. The caller holds w.mu.
func (w *Writer) pace(now time.Time) {
	if !w.unpublished {
		return
	}
	wait := limits.CapturePublishInterval - now.Sub(w.lastPublish)
	if wait <= 0 {
		w.publish()
		return
	}
	if !w.quietArmed {
		w.quietArmed = true
		if w.quiet == nil {
			w.quiet = time.AfterFunc(wait, w.publishQuiet)
		} else {
			w.quiet.Reset(wait)
		}
	}
}

// publishQuiet is the quiet timer's: it publishes what Drain left unpublished.
func (w *Writer) publishQuiet() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.quietArmed = false
	w.flush()
}

// flush publishes counters that moved since the last header, unless the
// writer is finished. The caller holds w.mu.
func (w *Writer) flush() {
	if w.unpublished && !w.sealed && !w.closed {
		w.publish()
	}
}

// append stores p at the end of the stream in pieces of at most the slack,
// publishing first whenever a piece would end more than the slack past the
// published end: the ring's slack covers exactly that much.
func (w *Writer) append(p []byte, now time.Time) {
	for len(p) > 0 {
		c := p[:min(len(p), slackBytes)]
		p = p[len(c):]
		if w.h.stored+int64(len(c))-w.published > slackBytes {
			w.publish()
		}
		w.store(c)
		w.h.observed += int64(len(c))
		w.h.lastNano = now.UnixNano()
		w.unpublished = true
	}
}

// store writes c, which starts at stream position h.observed, and advances
// h.stored past each piece that reached the disk. After any failure nothing
// more is stored: the header would otherwise claim bytes that are missing,
// and a lapped ring could not be detected by readers.
func (w *Writer) store(c []byte) {
	if w.h.flags&flagWriteError != 0 {
		return
	}
	pos := w.h.observed
	for len(c) > 0 {
		off, k := locate(pos, len(c))
		if n, err := w.pwrite(c[:k], off); err != nil || n != k {
			w.h.flags |= flagWriteError
			return
		}
		pos += int64(k)
		c = c[k:]
		w.h.stored = pos
	}
}

// publish writes the header with a single pwrite.
func (w *Writer) publish() error {
	w.lastPublish = time.Now()
	w.h.encode(w.buf[:])
	n, err := w.pwrite(w.buf[:], 0)
	if err == nil && n != len(w.buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		// Readers still see the previous header; writing more data past it
		// could lap the ring behind their back, so stop storing.
		w.h.flags |= flagWriteError
		return err
	}
	w.published, w.unpublished = w.h.stored, false
	return nil
}

// Seal marks the capture complete (the stream reached EOF), publishes the
// final header and fsyncs the file. Sealing twice is a no-op.
func (w *Writer) Seal() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errWriterDone
	}
	if w.sealed {
		return nil
	}
	w.sealed = true
	w.stopQuiet()
	w.h.flags |= flagComplete
	if err := w.publish(); err != nil {
		return fmt.Errorf("capture: seal: %w", err)
	}
	if err := w.fsync(); err != nil {
		return fmt.Errorf("capture: seal: %w", err)
	}
	return nil
}

func (w *Writer) fsync() error {
	if w.fsyncFault != nil {
		return w.fsyncFault
	}
	return w.f.Sync()
}

// Close publishes what was captured and closes the file; later writes fail
// and are not counted. Closing without Seal leaves an incomplete capture, as
// a crash would.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.flush()
	w.stopQuiet()
	w.closed = true
	return w.f.Close()
}

func (w *Writer) stopQuiet() {
	if w.quiet != nil {
		w.quiet.Stop()
		w.quietArmed = false
	}
}

// Meta returns the writer's current counters.
func (w *Writer) Meta() Meta {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.h.meta()
}

// Drain copies r into w until EOF: a pipe by the kernel alone (see
// splicePipe), anything else read in pieces of up to limits.CaptureReadBytes,
// publishing at a bounded rate (see drainWrite) and once more when r ends.
// It returns r's error other than io.EOF, or an error once w is sealed or
// closed; what r delivered after that is not counted.
func Drain(w *Writer, r io.Reader) error {
	if f, ok := r.(*os.File); ok {
		if done, err := w.splicePipe(f); done {
			w.mu.Lock()
			w.flush()
			w.stopQuiet()
			w.mu.Unlock()
			return err
		}
	}
	buf := make([]byte, readBytes)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := w.drainWrite(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			w.mu.Lock()
			w.flush()
			w.stopQuiet()
			w.mu.Unlock()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
