package capture

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

var errWriterDone = fmt.Errorf("capture: write after seal or close: %w", os.ErrClosed)

// Writer appends one stream to a capture file. It is safe for concurrent use,
// though a stream normally has a single producer (Drain).
type Writer struct {
	mu     sync.Mutex
	f      *os.File
	pwrite func(p []byte, off int64) (int, error) // f.WriteAt; a seam for fault tests
	h      header
	buf    [fieldsLen]byte // header encoding, reused so Write does not allocate
	sealed bool
	closed bool

	// fsyncFault, set by fault tests, simulates an fsync that fails.
	fsyncFault error
}

// Create creates a new capture file at path (mode 0600; it must not exist)
// and publishes an empty header.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	w := &Writer{f: f, pwrite: f.WriteAt}
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

// Write captures p. Disk failures never reach the producer: the bytes are
// counted as observed but dropped, and Write still returns len(p), nil. It
// fails only after Seal or Close.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sealed || w.closed {
		return 0, errWriterDone
	}
	n := len(p)
	for len(p) > 0 {
		// Publish at least every chunkBytes: the ring's slack covers exactly
		// one chunk written past the published end.
		c := p[:min(len(p), chunkBytes)]
		p = p[len(c):]
		w.store(c)
		w.h.observed += int64(len(c))
		w.h.lastNano = time.Now().UnixNano()
		w.publish()
	}
	return n, nil
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
	w.h.encode(w.buf[:])
	n, err := w.pwrite(w.buf[:], 0)
	if err == nil && n != len(w.buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		// Readers still see the previous header; writing more data past it
		// could lap the ring behind their back, so stop storing.
		w.h.flags |= flagWriteError
	}
	return err
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

// Close closes the file. Closing without Seal leaves an incomplete capture,
// as a crash would.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	return w.f.Close()
}

// Meta returns the writer's current counters.
func (w *Writer) Meta() Meta {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.h.meta()
}

// Drain copies r into w until EOF with a CaptureReadChunk buffer. It returns
// r's error other than io.EOF, or an error if w was already sealed or closed.
func Drain(w *Writer, r io.Reader) error {
	buf := make([]byte, chunkBytes)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
