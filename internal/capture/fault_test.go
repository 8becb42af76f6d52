package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"syscall"
	"testing"
	"time"
)

// writePos appends position-derived bytes [from, to) to w in read-chunk
// pieces, as Drain would.
func writePos(t *testing.T, w *Writer, from, to int64) {
	t.Helper()
	buf := make([]byte, 64<<10)
	for pos := from; pos < to; {
		c := buf[:min(int64(len(buf)), to-pos)]
		fillPos(c, pos)
		if _, err := w.Write(c); err != nil {
			t.Fatal(err)
		}
		pos += int64(len(c))
	}
}

// overwriteHeader writes header bytes b over the file's header, as another
// writer of the same file would.
func overwriteHeader(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
}

func headerBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b[:fieldsLen]
}

// tearHeaders makes the first torn reads of each header read see a header
// torn by a concurrent pwrite: the current header's first half over an
// older header's second half. It returns the number of header reads.
func tearHeaders(t *testing.T, path string, torn int) *int {
	t.Helper()
	good := bytes.Clone(headerBytes(t, path))
	h, err := decodeHeader(good)
	if err != nil {
		t.Fatal(err)
	}
	h.observed, h.stored = h.observed-1, h.stored-1
	old := make([]byte, fieldsLen)
	h.encode(old)
	mixed := append(bytes.Clone(good[:offStored]), old[offStored:]...)
	reads := new(int)
	tornHeader = func(attempt int) {
		*reads++
		if attempt <= torn {
			overwriteHeader(t, path, mixed)
		} else {
			overwriteHeader(t, path, good)
		}
	}
	t.Cleanup(func() { tornHeader = nil })
	return reads
}

// TestTornHeaderIsRetried: a reader that meets a header mid-write reads it
// again rather than call a healthy capture corrupt.
func TestTornHeaderIsRetried(t *testing.T) {
	const total = headBytes + 300<<10
	w, path := newWriter(t)
	writePos(t, w, 0, total)
	for _, torn := range []int{1, 2, 3} {
		reads := tearHeaders(t, path, torn)
		m, err := readMeta(path)
		if err != nil {
			t.Fatalf("%d torn reads: ReadMeta: %v", torn, err)
		}
		checkMeta(t, m, total, total, false)
		if *reads != torn+1 {
			t.Fatalf("%d torn reads: header read %d times", torn, *reads)
		}
		p, _, err := readPage(path, headBytes-10, 20)
		if err != nil {
			t.Fatalf("%d torn reads: ReadPage: %v", torn, err)
		}
		want := make([]byte, 20)
		fillPos(want, headBytes-10)
		if p.Offset != headBytes-10 || !bytes.Equal(p.Data, want) {
			t.Fatalf("%d torn reads: page at %d with %d bytes", torn, p.Offset, len(p.Data))
		}
	}
}

// TestHeaderTornForeverIsCorrupt: a checksum that never matches is
// corruption, reported after a few reads, not a reader stuck retrying.
func TestHeaderTornForeverIsCorrupt(t *testing.T) {
	w, path := newWriter(t)
	writePos(t, w, 0, 1000)
	reads := tearHeaders(t, path, 1<<30)
	if _, err := readMeta(path); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadMeta: %v, want ErrCorrupt", err)
	}
	// The first read and four retries, spread over well under a millisecond.
	if *reads != 5 {
		t.Fatalf("header read %d times, want 5", *reads)
	}
}

// lapOnce makes the next page read find the writer lapping the ring by
// more bytes between its header read and its data read.
func lapOnce(t *testing.T, w *Writer, more int64) {
	t.Helper()
	lapDuringRead = func() {
		lapDuringRead = nil
		end := w.Meta().ObservedBytes
		writePos(t, w, end, end+more)
	}
	t.Cleanup(func() { lapDuringRead = nil })
}

// checkPosPage asserts a page of a position-derived stream.
func checkPosPage(t *testing.T, label string, p Page, offset, wantStart, wantEnd int64) {
	t.Helper()
	want := make([]byte, wantEnd-wantStart)
	fillPos(want, wantStart)
	var wantGap *Gap
	if wantStart > offset {
		wantGap = &Gap{From: offset, To: wantStart}
	}
	if p.Offset != wantStart || p.NextOffset != wantEnd || !bytes.Equal(p.Data, want) ||
		(p.Gap == nil) != (wantGap == nil) || (p.Gap != nil && *p.Gap != *wantGap) {
		t.Fatalf("%s: page [%d,%d) gap %v (%d bytes, intact %v); want [%d,%d) gap %v",
			label, p.Offset, p.NextOffset, p.Gap, len(p.Data), bytes.Equal(p.Data, want), wantStart, wantEnd, wantGap)
	}
}

// TestLapDuringReadDropsOverwrittenBytes: the writer wraps the ring while a
// reader pages the oldest tail bytes. The page keeps only the bytes still
// inside the 512 KiB tail after the lap, and says the rest is a gap.
func TestLapDuringReadDropsOverwrittenBytes(t *testing.T) {
	const kib = 1 << 10
	total := int64(512*kib + 2*576*kib) // wrapped twice
	w, path := newWriter(t)
	writePos(t, w, 0, total)
	lapOnce(t, w, 192*kib)
	off := total - 512*kib
	p, m, err := readPage(path, off, 512*kib)
	if err != nil {
		t.Fatal(err)
	}
	newTailStart := total + 192*kib - 512*kib
	checkPosPage(t, "lap in the tail", p, off, newTailStart, total)
	if m.ObservedBytes != total+192*kib {
		t.Fatalf("meta observed %d, want the writer's %d after the lap", m.ObservedBytes, total+192*kib)
	}
}

// TestLapAtTheHeadEnd: a 1 MiB stream has its head and tail touching; a lap
// while a page is read from the first tail byte moves the page past the
// overwritten bytes with a gap.
func TestLapAtTheHeadEnd(t *testing.T) {
	const kib = 1 << 10
	total := int64(1024 * kib)
	w, path := newWriter(t)
	writePos(t, w, 0, total)
	lapOnce(t, w, 128*kib)
	p, _, err := readPage(path, 512*kib, 512*kib)
	if err != nil {
		t.Fatal(err)
	}
	checkPosPage(t, "lap from the head end", p, 512*kib, 640*kib, total)
}

// TestLapAcrossTheHeadEnd: a page that starts in the head and runs into the
// ring while the writer laps keeps its head bytes, which are never
// overwritten, and stops at 512 KiB.
func TestLapAcrossTheHeadEnd(t *testing.T) {
	const kib = 1 << 10
	total := int64(1024 * kib)
	w, path := newWriter(t)
	writePos(t, w, 0, total)
	lapOnce(t, w, 128*kib)
	p, _, err := readPage(path, 512*kib-100, 1024*kib)
	if err != nil {
		t.Fatal(err)
	}
	checkPosPage(t, "lap across the head end", p, 512*kib-100, 512*kib-100, 512*kib)
}

// TestWriterCatchingUpWithoutLapKeepsPage: a writer that reaches exactly
// 1 MiB while a page is read across the head end overwrote nothing, so the
// page keeps every byte.
func TestWriterCatchingUpWithoutLapKeepsPage(t *testing.T) {
	const kib = 1 << 10
	total := int64(960 * kib)
	w, path := newWriter(t)
	writePos(t, w, 0, total)
	lapOnce(t, w, 64*kib)
	p, _, err := readPage(path, 512*kib-100, 1024*kib)
	if err != nil {
		t.Fatal(err)
	}
	checkPosPage(t, "writer at 1 MiB", p, 512*kib-100, 512*kib-100, total)
}

// TestPageAcrossTheHeadEndIsWhole: without a lap, a page of a stream under
// 1 MiB returns every byte in one page, across the 512 KiB head end.
func TestPageAcrossTheHeadEndIsWhole(t *testing.T) {
	const kib = 1 << 10
	total := int64(600 * kib)
	w, path := newWriter(t)
	writePos(t, w, 0, total)
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	p, _, err := readPage(path, 0, 1024*kib)
	if err != nil {
		t.Fatal(err)
	}
	checkPosPage(t, "whole stream", p, 0, 0, total)
	if !p.EOF {
		t.Fatal("no EOF on the page that holds the whole sealed stream")
	}
}

// TestCountersGoingBackwardsIsCorrupt: a header that, between a page's two
// header reads, claims fewer bytes than before is corruption.
func TestCountersGoingBackwardsIsCorrupt(t *testing.T) {
	total := int64(headBytes + 100000)
	for name, h := range map[string]header{
		"rolled back":                    {observed: total - 1000, stored: total - 1000},
		"stored fell back, observed not": {observed: total, stored: total - 1000, flags: flagWriteError},
		"observed fell back, stored not": {observed: total - 1, stored: total - 1000, flags: flagWriteError},
	} {
		w, path := newWriter(t)
		writePos(t, w, 0, total)
		if name == "observed fell back, stored not" {
			// The first header must already show the write error.
			first := header{observed: total, stored: total - 1000, flags: flagWriteError}
			b := make([]byte, fieldsLen)
			first.encode(b)
			overwriteHeader(t, path, b)
		}
		b := make([]byte, fieldsLen)
		h.encode(b)
		lapDuringRead = func() { lapDuringRead = nil; overwriteHeader(t, path, b) }
		_, _, err := readPage(path, total-5000, 1000)
		lapDuringRead = nil
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: ReadPage %v, want ErrCorrupt", name, err)
		}
	}
}

// TestSealReportsFailedFsync: Seal publishes the final header, and says so
// when the file could not be made durable.
func TestSealReportsFailedFsync(t *testing.T) {
	w, path := newWriter(t)
	writePos(t, w, 0, 1000)
	w.fsyncFault = syscall.EIO
	if err := w.Seal(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Seal with a failing fsync: %v, want EIO", err)
	}
	m, err := readMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	checkMeta(t, m, 1000, 1000, true)
}

// TestOnDiskLayout pins format version 1, which a newer agent must still
// read from an older supervisor: a 4096-byte header, then the 512 KiB
// head, then a 576 KiB ring (512 KiB tail plus one 64 KiB read chunk)
// where stream position p >= 512 KiB lives at slot (p - 512 KiB) mod 576 KiB.
func TestOnDiskLayout(t *testing.T) {
	const kib = 1 << 10
	total := int64(512*kib + 576*kib + 1000)
	w, path := newWriter(t)
	writePos(t, w, 0, total)
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if string(b[:8]) != "CCCAPTUR" || le.Uint32(b[8:]) != 1 || le.Uint32(b[12:]) != 1 ||
		le.Uint32(b[16:]) != 512*kib || le.Uint32(b[20:]) != 512*kib || le.Uint32(b[24:]) != 64*kib ||
		le.Uint32(b[28:]) != 4096 || le.Uint64(b[32:]) != uint64(total) || le.Uint64(b[40:]) != uint64(total) {
		t.Fatalf("header fields % x", b[:60])
	}
	if len(b) != 4096+512*kib+576*kib {
		t.Fatalf("file size %d", len(b))
	}
	head := make([]byte, 512*kib)
	fillPos(head, 0)
	if !bytes.Equal(b[4096:4096+512*kib], head) {
		t.Fatal("the head is not stored right after the header")
	}
	for p := total - 512*kib; p < total; p++ {
		if got := b[4096+512*kib+(p-512*kib)%(576*kib)]; got != posByte(p) {
			t.Fatalf("position %d: byte %#x at its ring slot, want %#x", p, got, posByte(p))
		}
	}
}

// TestLargestCounterAccepted: a header may count up to 2^63-1 observed
// bytes; only beyond that is it corrupt.
func TestLargestCounterAccepted(t *testing.T) {
	_, path := newWriter(t)
	b := make([]byte, fieldsLen)
	(&header{observed: math.MaxInt64, flags: flagWriteError}).encode(b)
	overwriteHeader(t, path, b)
	m, err := readMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.ObservedBytes != math.MaxInt64 || m.DroppedBytes != math.MaxInt64 || m.RetainedBytes != 0 || !m.WriteError {
		t.Fatalf("meta %+v", m)
	}
}

// TestFirstHeaderRetriesOnlyYield: a header torn by a pwrite under way is
// read again at once, twice, for a pwrite about to finish; only the later
// retries wait headerRetryDelay, for a writer descheduled in mid-pwrite.
func TestFirstHeaderRetriesOnlyYield(t *testing.T) {
	old := headerRetryDelay
	headerRetryDelay = 500 * time.Millisecond // far above any yield
	t.Cleanup(func() { headerRetryDelay = old })
	w, path := newWriter(t)
	writePos(t, w, 0, 1000)
	for _, c := range []struct {
		torn     int
		wantWait bool
	}{{1, false}, {2, false}, {3, true}} {
		tearHeaders(t, path, c.torn)
		start := time.Now()
		m, err := readMeta(path)
		elapsed := time.Since(start)
		if err != nil {
			t.Fatalf("%d torn reads: %v", c.torn, err)
		}
		checkMeta(t, m, 1000, 1000, false)
		if waited := elapsed >= headerRetryDelay; waited != c.wantWait {
			t.Fatalf("%d torn reads took %v; want a %v wait: %v", c.torn, elapsed, headerRetryDelay, c.wantWait)
		}
	}
}

// TestHeaderTornFor400usIsRetriedThrough: the two paced retries of 200 µs
// carry a reader over a writer stalled 400 µs in mid-pwrite.
func TestHeaderTornFor400usIsRetriedThrough(t *testing.T) {
	w, path := newWriter(t)
	writePos(t, w, 0, 1000)
	good := bytes.Clone(headerBytes(t, path))
	torn := bytes.Clone(good)
	torn[offObserved] ^= 1 // the checksum no longer matches
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var first time.Time
	tornHeader = func(attempt int) {
		if attempt == 1 {
			first = time.Now()
		}
		b := good
		if time.Since(first) < 400*time.Microsecond {
			b = torn
		}
		if _, err := f.WriteAt(b, 0); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { tornHeader = nil })
	m, err := readMeta(path)
	if err != nil {
		t.Fatalf("header torn for 400 µs: %v", err)
	}
	checkMeta(t, m, 1000, 1000, false)
}

// TestOnlyPagesWithRingBytesRereadTheHeader: head bytes are never
// overwritten, so a page of them, or an empty page at the live end, takes
// one header read; a page holding a ring byte reads the header again, to
// drop bytes the writer may have lapped meanwhile.
func TestOnlyPagesWithRingBytesRereadTheHeader(t *testing.T) {
	const total = headBytes + 100000
	w, path := newWriter(t)
	writePos(t, w, 0, total)
	reads := 0
	tornHeader = func(int) { reads++ }
	t.Cleanup(func() { tornHeader = nil })
	for _, c := range []struct {
		label      string
		offset     int64
		max        int
		start, end int64
		wantReads  int
	}{
		{"head start", 0, 100, 0, 100, 1},
		{"up to the head end", headBytes - 10, 10, headBytes - 10, headBytes, 1},
		{"at the live end", total, 10, total, total, 1},
		{"one ring byte", headBytes - 10, 11, headBytes - 10, headBytes + 1, 2},
		{"ring only", headBytes + 5, 10, headBytes + 5, headBytes + 15, 2},
	} {
		reads = 0
		p, _, err := readPage(path, c.offset, c.max)
		if err != nil {
			t.Fatalf("%s: %v", c.label, err)
		}
		checkPosPage(t, c.label, p, c.offset, c.start, c.end)
		if reads != c.wantReads {
			t.Fatalf("%s: %d header reads, want %d", c.label, reads, c.wantReads)
		}
	}
}

// TestPageAtTheHeadEndJumpsTheGap: in a truncated stream, a page asked at
// 512 KiB, the first discarded position, starts at the first tail byte with
// as many bytes as asked.
func TestPageAtTheHeadEndJumpsTheGap(t *testing.T) {
	const total = 3 << 20
	w, path := newWriter(t)
	writePos(t, w, 0, total)
	p, _, err := readPage(path, headBytes, 10)
	if err != nil {
		t.Fatal(err)
	}
	checkPosPage(t, "at the head end", p, headBytes, total-tailBytes, total-tailBytes+10)
}
