package capture

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"
)

// Gap is a discarded range [From, To) of the stream.
type Gap struct{ From, To int64 }

// Page is one read of a capture. Data holds stream bytes
// [Offset, NextOffset). Gap is set when bytes between the requested offset
// and Offset were discarded. EOF means the capture is complete and the page
// reaches the end of the stream.
type Page struct {
	Offset     int64
	Data       []byte
	NextOffset int64
	Gap        *Gap
	EOF        bool
}

// Fault seams, nil outside tests. tornHeader runs before each header read
// (attempt counts from 1) to simulate a writer whose header pwrite is under
// way; lapDuringRead runs between a page's header read and its data read, to
// simulate a writer that laps the ring while a reader pages.
var (
	tornHeader    func(attempt int)
	lapDuringRead func()
)

// ReadMeta reads the capture metadata of the open capture file f. The
// caller opens it, so that it decides what may stand in the file's place.
func ReadMeta(f *os.File) (Meta, error) {
	h, err := readHeader(f)
	if err != nil {
		return Meta{}, err
	}
	return h.meta(), nil
}

// readHeader reads and validates the header, retrying reads torn by a
// concurrent header pwrite, and checks that the file holds every byte the
// header claims.
func readHeader(f *os.File) (header, error) {
	var b [fieldsLen]byte
	for attempt := 1; ; attempt++ {
		if tornHeader != nil {
			tornHeader(attempt)
		}
		if _, err := f.ReadAt(b[:], 0); err != nil {
			if errors.Is(err, io.EOF) {
				return header{}, fmt.Errorf("%w: short header", ErrCorrupt)
			}
			return header{}, err
		}
		h, err := decodeHeader(b[:])
		if err == errChecksum && attempt < headerRetries {
			// The torn window is one small pwrite: yield first, then wait.
			if attempt <= 2 {
				runtime.Gosched()
			} else {
				time.Sleep(headerRetryDelay)
			}
			continue
		}
		if err != nil {
			return header{}, err
		}
		fi, err := f.Stat()
		if err != nil {
			return header{}, err
		}
		if fi.Size() < h.minFileSize() {
			return header{}, fmt.Errorf("%w: file shorter than its header claims", ErrCorrupt)
		}
		return h, nil
	}
}

// ReadPage reads from the open capture file f at most maxBytes retained
// bytes at or after stream position offset. An offset inside the discarded
// middle (or past the bytes a failed disk write left retained) yields a Gap
// and data from the next retained byte. An offset past the end is ErrOffsetBeyondEnd once the capture is
// complete, and an empty page while it is live. The returned Meta is the
// freshest header read.
func ReadPage(f *os.File, offset int64, maxBytes int) (Page, Meta, error) {
	return pageOf(f, offset, maxBytes, nil)
}

// ReadPageInto is ReadPage of at most len(buf) bytes read into buf, for a
// reader that follows a stream and reuses one buffer; the page's Data is
// valid until buf is used again.
func ReadPageInto(f *os.File, offset int64, buf []byte) (Page, Meta, error) {
	return pageOf(f, offset, len(buf), buf)
}

func pageOf(f *os.File, offset int64, maxBytes int, buf []byte) (Page, Meta, error) {
	if offset < 0 || maxBytes <= 0 {
		return Page{}, Meta{}, fmt.Errorf("%w: offset %d, max %d", ErrInvalid, offset, maxBytes)
	}
	h, err := readHeader(f)
	if err != nil {
		return Page{}, Meta{}, err
	}
	if offset > h.observed {
		if h.flags&flagComplete != 0 {
			// The counters come with the error: the caller says where
			// the stream ends.
			return Page{}, h.meta(), fmt.Errorf("%w: offset %d, end %d", ErrOffsetBeyondEnd, offset, h.observed)
		}
		return Page{Offset: offset, NextOffset: offset}, h.meta(), nil
	}

	headEnd, tailStart := layout(h.stored)
	start, limit := offset, h.stored
	switch {
	case offset >= h.stored: // nothing retained from here on (write error)
		start, limit = h.observed, h.observed
	case offset >= headEnd && offset < tailStart: // in the discarded middle
		start = tailStart
	case offset < headEnd && tailStart > headEnd: // the head ends at the gap
		limit = headEnd
	}
	end := start + min(limit-start, int64(maxBytes))
	var data []byte
	if buf != nil {
		data = buf[:end-start]
	} else {
		data = make([]byte, end-start)
	}
	if lapDuringRead != nil {
		lapDuringRead()
	}
	if err := readStream(f, data, start); err != nil {
		return Page{}, Meta{}, err
	}

	if end > headBytes && len(data) > 0 {
		// The live writer may have lapped ring bytes while we read them. It
		// writes at most one chunk past what it publishes, so every position
		// >= newStored-Tail was intact when read; anything older is dropped.
		h2, err := readHeader(f)
		if err != nil {
			return Page{}, Meta{}, err
		}
		if h2.observed < h.observed || h2.stored < h.stored {
			return Page{}, Meta{}, fmt.Errorf("%w: counters went backwards", ErrCorrupt)
		}
		if lo := h2.stored - tailBytes; start < headBytes {
			if lo > headBytes { // keep the head bytes, never lapped
				data = data[:headBytes-start]
			}
		} else if lo > start {
			data = data[min(lo-start, int64(len(data))):]
			start = lo
		}
		h = h2
	}

	p := Page{Offset: start, Data: data, NextOffset: start + int64(len(data))}
	if start > offset {
		p.Gap = &Gap{From: offset, To: start}
	}
	m := h.meta()
	p.EOF = m.Complete && p.NextOffset == m.ObservedBytes
	return p, m, nil
}

// readStream fills p with the stream bytes starting at position pos.
func readStream(f *os.File, p []byte, pos int64) error {
	for len(p) > 0 {
		off, k := locate(pos, len(p))
		if _, err := f.ReadAt(p[:k], off); err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("%w: file shorter than its header claims", ErrCorrupt)
			}
			return err
		}
		pos += int64(k)
		p = p[k:]
	}
	return nil
}
