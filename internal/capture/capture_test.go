package capture

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/commandcore/commandcore/internal/testkit"
)

// posByte is the byte at stream position pos in position-derived streams; a
// ring slot lapped by one ring length holds a different value.
func posByte(pos int64) byte { return byte(pos*7 + pos>>9) }

func fillPos(b []byte, pos int64) {
	for i := range b {
		b[i] = posByte(pos + int64(i))
	}
}

func randomStream(seed uint64, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed)}).Read(b)
	return b
}

func newWriter(t testing.TB) (*Writer, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stdout.cap")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, path
}

// writeRandomChunks writes data in chunk sizes in [1, maxChunk].
func writeRandomChunks(t testing.TB, w *Writer, data []byte, rng *rand.Rand, maxChunk int) {
	t.Helper()
	for len(data) > 0 {
		k := min(len(data), 1+rng.IntN(maxChunk))
		n, err := w.Write(data[:k])
		if err != nil || n != k {
			t.Fatalf("Write(%d bytes) = %d, %v", k, n, err)
		}
		data = data[k:]
	}
}

// checkPage asserts the invariants every successful page must hold.
func checkPage(t testing.TB, p Page, m Meta, offset int64, maxBytes int) {
	t.Helper()
	switch {
	case len(p.Data) > maxBytes:
		t.Fatalf("page at %d: %d bytes > max %d", offset, len(p.Data), maxBytes)
	case p.NextOffset != p.Offset+int64(len(p.Data)):
		t.Fatalf("page at %d: NextOffset %d != Offset %d + %d", offset, p.NextOffset, p.Offset, len(p.Data))
	case p.Offset < offset:
		t.Fatalf("page at %d: Offset %d before the requested offset", offset, p.Offset)
	case p.Gap == nil && p.Offset != offset:
		t.Fatalf("page at %d: Offset %d moved without a gap", offset, p.Offset)
	case p.Gap != nil && (p.Gap.From != offset || p.Gap.To != p.Offset || p.Gap.From >= p.Gap.To):
		t.Fatalf("page at %d: bad gap %+v for Offset %d", offset, *p.Gap, p.Offset)
	case p.EOF != (m.Complete && p.NextOffset == m.ObservedBytes):
		t.Fatalf("page at %d: EOF at %d with meta %+v", offset, p.NextOffset, m)
	case m.RetainedBytes+m.DroppedBytes != m.ObservedBytes || m.Truncated != (m.DroppedBytes > 0):
		t.Fatalf("inconsistent meta %+v", m)
	}
}

type pageResult struct {
	data  []byte // retained bytes, in order
	gaps  []Gap
	eof   bool
	pages int
}

// readAll pages a quiescent capture from offset 0 to its end.
func readAll(t testing.TB, path string, maxBytes int) pageResult {
	t.Helper()
	var r pageResult
	var off int64
	for {
		p, m, err := readPage(path, off, maxBytes)
		if err != nil {
			t.Fatalf("readPage(%d, %d): %v", off, maxBytes, err)
		}
		checkPage(t, p, m, off, maxBytes)
		if r.eof {
			t.Fatalf("page after EOF at %d", off)
		}
		r.pages++
		r.data = append(r.data, p.Data...)
		if p.Gap != nil {
			r.gaps = append(r.gaps, *p.Gap)
		}
		r.eof = p.EOF
		if p.NextOffset == m.ObservedBytes {
			return r
		}
		if p.NextOffset == off {
			t.Fatalf("no progress at %d before the end %d", off, m.ObservedBytes)
		}
		off = p.NextOffset
	}
}

// expectRetained returns the bytes and gap a sealed capture of data keeps.
func expectRetained(data []byte) ([]byte, []Gap) {
	n := len(data)
	if n <= headBytes+tailBytes {
		return data, nil
	}
	want := append(append([]byte{}, data[:headBytes]...), data[n-tailBytes:]...)
	return want, []Gap{{From: headBytes, To: int64(n - tailBytes)}}
}

func checkMeta(t *testing.T, m Meta, observed, retained int64, complete bool) {
	t.Helper()
	if m.ObservedBytes != observed || m.RetainedBytes != retained || m.DroppedBytes != observed-retained ||
		m.Truncated != (observed > retained) || m.Complete != complete || m.WriteError {
		t.Fatalf("meta %+v, want observed %d retained %d complete %v", m, observed, retained, complete)
	}
	if (observed > 0) == m.LastOutputAt.IsZero() {
		t.Fatalf("LastOutputAt %v with %d observed bytes", m.LastOutputAt, observed)
	}
}

func TestFiveMiBKeepsHeadAndTail(t *testing.T) {
	const total = 5 << 20
	data := randomStream(1, total)
	w, path := newWriter(t)
	start := time.Now()
	// Chunks up to twice the read chunk exercise Write's internal split.
	writeRandomChunks(t, w, data, rand.New(rand.NewPCG(1, 2)), 2*slackBytes)
	want, wantGaps := expectRetained(data)

	if got := readAll(t, path, 1<<20); got.eof {
		t.Fatal("EOF before Seal")
	} else if !bytes.Equal(got.data, want) {
		t.Fatal("live capture: retained bytes differ")
	}
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	m, err := readMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	checkMeta(t, m, total, headBytes+tailBytes, true)
	if m.LastOutputAt.Before(start.Truncate(time.Second)) || m.LastOutputAt.After(time.Now()) {
		t.Fatalf("LastOutputAt %v outside the test run", m.LastOutputAt)
	}
	if wm := w.Meta(); wm != m {
		t.Fatalf("writer meta %+v != file meta %+v", wm, m)
	}
	for _, maxBytes := range []int{1000, 4096, slackBytes, 77777, headBytes, 1 << 20, 4 << 20} {
		got := readAll(t, path, maxBytes)
		if !got.eof {
			t.Fatalf("max %d: no EOF on the last page", maxBytes)
		}
		if !bytes.Equal(got.data, want) {
			t.Fatalf("max %d: retained bytes differ", maxBytes)
		}
		if len(got.gaps) != 1 || got.gaps[0] != wantGaps[0] {
			t.Fatalf("max %d: gaps %v, want %v", maxBytes, got.gaps, wantGaps)
		}
	}
}

func TestSmallStreams(t *testing.T) {
	sizes := []int{0, 1, headBytes - 1, headBytes, headBytes + 1, headBytes + tailBytes,
		headBytes + tailBytes + 1, headBytes + ringBytes + 3}
	for _, n := range sizes {
		data := randomStream(uint64(n), n)
		w, path := newWriter(t)
		writeRandomChunks(t, w, data, rand.New(rand.NewPCG(uint64(n), 0)), slackBytes)
		if err := w.Seal(); err != nil {
			t.Fatal(err)
		}
		want, wantGaps := expectRetained(data)
		m, err := readMeta(path)
		if err != nil {
			t.Fatal(err)
		}
		checkMeta(t, m, int64(n), int64(len(want)), true)
		for _, maxBytes := range []int{1, 333, 1 << 20} {
			if maxBytes == 1 && n > 2*slackBytes {
				continue // a million one-byte pages add nothing over 333
			}
			got := readAll(t, path, maxBytes)
			if !got.eof || !bytes.Equal(got.data, want) || len(got.gaps) != len(wantGaps) ||
				(len(wantGaps) == 1 && got.gaps[0] != wantGaps[0]) {
				t.Fatalf("size %d max %d: eof %v, %d bytes (want %d), gaps %v (want %v)",
					n, maxBytes, got.eof, len(got.data), len(want), got.gaps, wantGaps)
			}
			if n == 0 && got.pages != 1 {
				t.Fatalf("empty stream took %d pages", got.pages)
			}
		}
	}
}

func TestReadPageOffsets(t *testing.T) {
	const total = 3 << 20
	data := randomStream(3, total)
	w, path := newWriter(t)
	writeRandomChunks(t, w, data, rand.New(rand.NewPCG(3, 3)), slackBytes)
	tailStart := int64(total - tailBytes)

	// Inside the gap: continue at the first tail byte.
	p, _, err := readPage(path, headBytes+5, 10)
	if err != nil {
		t.Fatal(err)
	}
	if p.Gap == nil || *p.Gap != (Gap{From: headBytes + 5, To: tailStart}) || p.Offset != tailStart ||
		!bytes.Equal(p.Data, data[tailStart:tailStart+10]) {
		t.Fatalf("page in gap: %+v", p)
	}
	// A head page stops at the gap rather than crossing it.
	p, _, err = readPage(path, headBytes-4, 100)
	if err != nil {
		t.Fatal(err)
	}
	if p.Gap != nil || p.NextOffset != headBytes || !bytes.Equal(p.Data, data[headBytes-4:headBytes]) {
		t.Fatalf("head page: offset %d next %d gap %v", p.Offset, p.NextOffset, p.Gap)
	}
	// Live stream: past the end is an empty page, not an error.
	p, m, err := readPage(path, total+100, 10)
	if err != nil || p.Offset != total+100 || p.NextOffset != total+100 || len(p.Data) != 0 || p.EOF || m.Complete {
		t.Fatalf("beyond live end: %+v %+v %v", p, m, err)
	}
	p, _, err = readPage(path, total, 10)
	if err != nil || p.NextOffset != total || len(p.Data) != 0 || p.EOF {
		t.Fatalf("at live end: %+v %v", p, err)
	}
	for _, bad := range []struct {
		off int64
		max int
	}{{-1, 10}, {0, 0}, {0, -5}} {
		if _, _, err := readPage(path, bad.off, bad.max); !errors.Is(err, ErrInvalid) {
			t.Fatalf("readPage(%d, %d) = %v, want ErrInvalid", bad.off, bad.max, err)
		}
	}

	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	if _, m, err := readPage(path, total+1, 10); !errors.Is(err, ErrOffsetBeyondEnd) || m.ObservedBytes != total {
		t.Fatalf("beyond sealed end: %v, counters %+v; want ErrOffsetBeyondEnd with the stream's %d bytes", err, m, total)
	}
	p, _, err = readPage(path, total, 10)
	if err != nil || !p.EOF || len(p.Data) != 0 {
		t.Fatalf("at sealed end: %+v %v", p, err)
	}
	p, _, err = readPage(path, total-10, 10)
	if err != nil || !p.EOF || !bytes.Equal(p.Data, data[total-10:]) {
		t.Fatalf("last bytes: %+v %v", p, err)
	}
	if p, _, _ = readPage(path, total-10, 9); p.EOF {
		t.Fatal("EOF on a page that stops short of the end")
	}
	if _, err := w.Write([]byte("late")); err == nil {
		t.Fatal("Write after Seal succeeded")
	}
	if err := w.Seal(); err != nil {
		t.Fatalf("second Seal: %v", err)
	}
}

// TestReadPageIntoReadsAsReadPage: a page read into a reused buffer, one
// holding a previous page's bytes, is the page ReadPage reads, in the
// head, across the gap and at the end, and it lies in the buffer.
func TestReadPageIntoReadsAsReadPage(t *testing.T) {
	const total = 3 << 20
	w, path := newWriter(t)
	writeRandomChunks(t, w, randomStream(4, total), rand.New(rand.NewPCG(4, 4)), slackBytes)
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := bytes.Repeat([]byte{0xEE}, 1000)
	for _, off := range []int64{0, 17, headBytes - 400, headBytes + 5, total - tailBytes - 1, total - 300, total} {
		want, wm, err := ReadPage(f, off, len(buf))
		if err != nil {
			t.Fatal(err)
		}
		got, gm, err := ReadPageInto(f, off, buf)
		if err != nil || gm != wm || !bytes.Equal(got.Data, want.Data) || got.Offset != want.Offset || got.NextOffset != want.NextOffset ||
			got.EOF != want.EOF || (got.Gap == nil) != (want.Gap == nil) || got.Gap != nil && *got.Gap != *want.Gap {
			t.Fatalf("at %d: ReadPageInto %d bytes at %d (gap %v, eof %v), %v; ReadPage %d at %d (gap %v, eof %v)",
				off, len(got.Data), got.Offset, got.Gap, got.EOF, err, len(want.Data), want.Offset, want.Gap, want.EOF)
		}
		if len(got.Data) > 0 && &got.Data[0] != &buf[0] {
			t.Fatalf("at %d: the page is not in the buffer", off)
		}
	}
	if _, _, err := ReadPageInto(f, 0, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an empty buffer: %v, want ErrInvalid", err)
	}
}

// TestConcurrentReaderNeverSeesLappedBytes pages a capture while a writer
// streams position-derived data through the ring many times, aiming reads
// at the oldest tail bytes, the ones the writer is about to overwrite.
func TestConcurrentReaderNeverSeesLappedBytes(t *testing.T) {
	w, path := newWriter(t)
	var stop atomic.Bool
	done := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(7, 7))
		buf := make([]byte, 2*slackBytes)
		for pos := int64(0); !stop.Load(); {
			c := buf[:1+rng.IntN(len(buf))]
			fillPos(c, pos)
			if _, err := w.Write(c); err != nil {
				done <- err
				return
			}
			pos += int64(len(c))
		}
		done <- w.Seal()
	}()
	pageWhileWriting(t, w, path, func() error { stop.Store(true); return <-done })
}

// pageWhileWriting pages path while its writer w runs, checking every byte
// against the position-derived stream, then calls finish (which must stop
// the writer and seal the capture) and pages the sealed file once more.
func pageWhileWriting(t *testing.T, w *Writer, path string, finish func() error) {
	t.Helper()
	wantPages := 1000
	if testing.Short() {
		wantPages = 300
	}
	rng := rand.New(rand.NewPCG(8, 8))
	var pages, bytesChecked int
	var follow int64
	// A slow writer (the race detector, a loaded machine) is paged until it
	// has lapped the ring twice, within a generous deadline.
	deadline := time.Now().Add(30 * time.Second)
	for finished := false; !finished; {
		if pages >= wantPages && (w.Meta().ObservedBytes >= 2*(headBytes+ringBytes) || time.Now().After(deadline)) {
			if err := finish(); err != nil {
				t.Fatal(err)
			}
			finished = true // one more page against the sealed file
		}
		m, err := readMeta(path)
		if err != nil {
			t.Fatal(err)
		}
		var off int64
		switch rng.IntN(4) {
		case 0, 1: // the oldest tail bytes, about to be lapped
			off = max(0, m.ObservedBytes-tailBytes+int64(rng.IntN(4096))-2048)
		case 2:
			off = rng.Int64N(m.ObservedBytes + 1)
		case 3:
			off = follow
		}
		maxBytes := 1 + rng.IntN(tailBytes)
		p, pm, err := readPage(path, off, maxBytes)
		if err != nil {
			t.Fatalf("readPage(%d): %v", off, err)
		}
		checkPage(t, p, pm, off, maxBytes)
		for i, b := range p.Data {
			if pos := p.Offset + int64(i); b != posByte(pos) {
				t.Fatalf("page [%d,%d): byte at %d = %#x, want %#x", p.Offset, p.NextOffset, pos, b, posByte(pos))
			}
		}
		pages++
		bytesChecked += len(p.Data)
		follow = p.NextOffset
	}
	m := w.Meta()
	t.Logf("%d pages, %d bytes checked, %d bytes written", pages, bytesChecked, m.ObservedBytes)
	if bytesChecked == 0 || m.ObservedBytes < 2*(headBytes+ringBytes) {
		t.Fatalf("too little exercised: %d bytes checked, %d written", bytesChecked, m.ObservedBytes)
	}
}

func TestUnsealedCaptureIsIncompleteButConsistent(t *testing.T) {
	const total = headBytes + tailBytes + 12345
	data := randomStream(4, total)
	w, path := newWriter(t)
	writeRandomChunks(t, w, data, rand.New(rand.NewPCG(4, 4)), slackBytes)
	// As a crash would: the file is left without a final header.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := readMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	checkMeta(t, m, total, headBytes+tailBytes, false)
	got := readAll(t, path, 100000)
	want, wantGaps := expectRetained(data)
	if got.eof || !bytes.Equal(got.data, want) || len(got.gaps) != 1 || got.gaps[0] != wantGaps[0] {
		t.Fatalf("eof %v, %d bytes, gaps %v", got.eof, len(got.data), got.gaps)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Fatal("Write after Close succeeded")
	}
}

// TestHelperKilledWriter is the writer process of TestSIGKILLedWriter.
func TestHelperKilledWriter(t *testing.T) {
	path := os.Getenv("CAPTURE_TEST_KILL_PATH")
	if path == "" {
		t.Skip("helper process for TestSIGKILLedWriter")
	}
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var out io.Writer = w
	if os.Getenv("CAPTURE_TEST_KILL_DRAIN") != "" {
		// Through a pipe, as the supervisor captures: Drain splices it
		// and publishes lazily.
		r, pw, err := Pipe()
		if err != nil {
			t.Fatal(err)
		}
		go Drain(w, r)
		out = pw
	}
	rng := rand.New(rand.NewPCG(9, 9))
	buf := make([]byte, slackBytes)
	for pos := int64(0); ; {
		c := buf[:1+rng.IntN(len(buf))]
		fillPos(c, pos)
		out.Write(c)
		pos += int64(len(c))
	}
}

// TestSIGKILLedWriter kills a writer process mid-stream and checks that what
// it left on disk is exactly what its last header describes.
func TestSIGKILLedWriter(t *testing.T) {
	t.Run("write", func(t *testing.T) { killWriter(t) })
	t.Run("drain", func(t *testing.T) { killWriter(t, "CAPTURE_TEST_KILL_DRAIN=1") })
}

func killWriter(t *testing.T, env ...string) {
	path := filepath.Join(t.TempDir(), "stdout.cap")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperKilledWriter$")
	cmd.Env = append(append(os.Environ(), "CAPTURE_TEST_KILL_PATH="+path), env...)
	// The writer writes until killed: it must not outlive a test that
	// failed or timed out before killing it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Poll(60*time.Second, func() error {
		if m, err := readMeta(path); err != nil || m.ObservedBytes <= 3<<20 {
			return fmt.Errorf("%+v %v", m, err)
		}
		return nil
	}); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("writer made no progress: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("writer exited cleanly; it should have been killed")
	}

	m, err := readMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	checkMeta(t, m, m.ObservedBytes, headBytes+tailBytes, false)
	got := readAll(t, path, 1<<20)
	if got.eof || len(got.gaps) != 1 || got.gaps[0] != (Gap{From: headBytes, To: m.ObservedBytes - tailBytes}) {
		t.Fatalf("eof %v gaps %v with %d observed", got.eof, got.gaps, m.ObservedBytes)
	}
	want := make([]byte, headBytes+tailBytes)
	fillPos(want[:headBytes], 0)
	fillPos(want[headBytes:], m.ObservedBytes-tailBytes)
	if !bytes.Equal(got.data, want) {
		t.Fatal("retained bytes differ from the stream the header describes")
	}
}

func TestCorruptFiles(t *testing.T) {
	w, path := newWriter(t)
	writeRandomChunks(t, w, randomStream(5, 100000), rand.New(rand.NewPCG(5, 5)), slackBytes)
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	reencode := func(b []byte, edit func(*header)) []byte {
		h, err := decodeHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		edit(&h)
		h.encode(b)
		return b
	}
	cases := map[string]func(b []byte) []byte{
		"flipped counter bit": func(b []byte) []byte { b[offObserved] ^= 1; return b },
		"bad magic":           func(b []byte) []byte { b[0] = 'X'; return b },
		"future version":      func(b []byte) []byte { b[offVersion] = 2; return b },
		"empty":               func(b []byte) []byte { return b[:0] },
		"torn header":         func(b []byte) []byte { return b[:fieldsLen-1] },
		"header only":         func(b []byte) []byte { return b[:headerSize] },
		"truncated data":      func(b []byte) []byte { return b[:len(b)-1] },
		"unknown flag": func(b []byte) []byte {
			return reencode(b, func(h *header) { h.flags |= 1 << 7 })
		},
		"stored beyond observed": func(b []byte) []byte {
			return reencode(b, func(h *header) { h.stored = h.observed + 1 })
		},
		"dropped without write error": func(b []byte) []byte {
			return reencode(b, func(h *header) { h.stored-- })
		},
		"stored beyond observed after a write error": func(b []byte) []byte {
			return reencode(b, func(h *header) { h.stored, h.flags = h.observed+1, h.flags|flagWriteError })
		},
		"observed beyond int64": func(b []byte) []byte {
			return reencode(b, func(h *header) { h.observed, h.stored, h.flags = math.MinInt64, 0, flagWriteError })
		},
		"output time before 1970": func(b []byte) []byte {
			return reencode(b, func(h *header) { h.lastNano = -1 })
		},
		"bad magic, valid checksum": func(b []byte) []byte {
			b[0] = 'X'
			fixCRC(b)
			return b
		},
		"other ring size":   func(b []byte) []byte { return withField(b, offSlackBytes) },
		"other head size":   func(b []byte) []byte { return withField(b, offHeadBytes) },
		"other tail size":   func(b []byte) []byte { return withField(b, offTailBytes) },
		"other header size": func(b []byte) []byte { return withField(b, offHeaderSize) },
	}
	checkCorrupt := func(name string, content []byte) {
		t.Helper()
		bad := filepath.Join(t.TempDir(), "bad.cap")
		if err := os.WriteFile(bad, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readMeta(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: ReadMeta error %v, want ErrCorrupt", name, err)
		}
		if _, _, err := readPage(bad, 0, 100); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: ReadPage error %v, want ErrCorrupt", name, err)
		}
	}
	for name, corrupt := range cases {
		checkCorrupt(name, corrupt(bytes.Clone(good)))
	}
	// Files cut inside the ring: every byte the header claims must be there.
	for _, n := range []int{headBytes + 5000, headBytes + ringBytes + 5000} {
		w, path := newWriter(t)
		writeRandomChunks(t, w, randomStream(5, n), rand.New(rand.NewPCG(5, 6)), slackBytes)
		if err := w.Seal(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		checkCorrupt(fmt.Sprintf("%d-byte stream, last byte cut", n), b[:len(b)-1])
		checkCorrupt(fmt.Sprintf("%d-byte stream, ring cut", n), b[:ringOffset+1])
	}
	if _, err := Create(path); !errors.Is(err, os.ErrExist) {
		t.Fatalf("Create over an existing capture: %v, want ErrExist", err)
	}
}

// withField changes one layout field of a header and fixes its checksum.
func withField(b []byte, off int) []byte {
	b[off]++
	fixCRC(b)
	return b
}

// faultyDisk wraps a writer's pwrite: data writes fail with ENOSPC once
// budget data bytes have been written (the failing write lands partially, as
// a real full disk may do); the allocated header region stays writable.
type faultyDisk struct {
	real        func([]byte, int64) (int, error)
	budget      int
	writesAfter int // data writes attempted after the first failure
	failed      bool
}

func (d *faultyDisk) pwrite(p []byte, off int64) (int, error) {
	if off < headerSize {
		return d.real(p, off)
	}
	if d.failed {
		d.writesAfter++
	}
	if len(p) <= d.budget {
		d.budget -= len(p)
		return d.real(p, off)
	}
	n, _ := d.real(p[:d.budget], off)
	d.budget = 0
	d.failed = true
	return n, syscall.ENOSPC
}

func TestDiskFullStopsRetentionHonestly(t *testing.T) {
	const total = 3 << 20
	for _, allowed := range []int{1000, headBytes + 1, headBytes + tailBytes + 100000, headBytes + 2*ringBytes} {
		data := randomStream(6, total)
		w, path := newWriter(t)
		disk := &faultyDisk{real: w.pwrite, budget: allowed}
		w.pwrite = disk.pwrite
		writeRandomChunks(t, w, data, rand.New(rand.NewPCG(6, uint64(allowed))), 2*slackBytes)
		if err := w.Seal(); err != nil {
			t.Fatal(err)
		}
		if disk.writesAfter != 0 {
			t.Fatalf("allowed %d: %d data writes after the disk filled", allowed, disk.writesAfter)
		}
		m, err := readMeta(path)
		if err != nil {
			t.Fatal(err)
		}
		if m.ObservedBytes != total || !m.WriteError || !m.Truncated || !m.Complete ||
			m.RetainedBytes+m.DroppedBytes != total {
			t.Fatalf("allowed %d: meta %+v", allowed, m)
		}
		// stored is where the last fully written piece ended: within one
		// piece (at most a chunk) of the budget.
		stored := disk.storedEnd(t, path)
		if stored > int64(allowed) || stored <= int64(allowed-slackBytes) {
			t.Fatalf("allowed %d: stored end %d", allowed, stored)
		}
		want, wantGaps := expectRetained(data[:stored])
		wantGaps = append(wantGaps, Gap{From: stored, To: total})
		if m.RetainedBytes != int64(len(want)) {
			t.Fatalf("allowed %d: retained %d, want %d", allowed, m.RetainedBytes, len(want))
		}
		for _, maxBytes := range []int{4096, 1 << 20} {
			got := readAll(t, path, maxBytes)
			if !got.eof || !bytes.Equal(got.data, want) || len(got.gaps) != len(wantGaps) {
				t.Fatalf("allowed %d max %d: eof %v, %d bytes (want %d), gaps %v (want %v)",
					allowed, maxBytes, got.eof, len(got.data), len(want), got.gaps, wantGaps)
			}
			for i := range wantGaps {
				if got.gaps[i] != wantGaps[i] {
					t.Fatalf("allowed %d: gaps %v, want %v", allowed, got.gaps, wantGaps)
				}
			}
		}
	}
}

// TestDiskFullJustPastTheHeadKeepsTheWholeHead: a write that crosses the
// head end reaches the disk as two pieces, the head's and the ring's, and
// retention ends after the last whole piece, so a disk that fills one byte
// into the ring keeps the whole 512 KiB head.
func TestDiskFullJustPastTheHeadKeepsTheWholeHead(t *testing.T) {
	const total = headBytes + 10000
	w, path := newWriter(t)
	disk := &faultyDisk{real: w.pwrite, budget: headBytes + 1}
	w.pwrite = disk.pwrite
	// 1000 bytes first, so that one 64 KiB write spans [459752, 525288).
	writePos(t, w, 0, 1000)
	writePos(t, w, 1000, total)
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	m, err := readMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.ObservedBytes != total || m.RetainedBytes != headBytes || !m.WriteError {
		t.Fatalf("meta %+v; want %d observed, the %d-byte head retained, a write error", m, total, headBytes)
	}
	want := make([]byte, headBytes)
	fillPos(want, 0)
	got := readAll(t, path, 1<<20)
	if !bytes.Equal(got.data, want) || !equalGaps(got.gaps, []Gap{{From: headBytes, To: total}}) {
		t.Fatalf("%d bytes, gaps %v; want the head and a gap to the end", len(got.data), got.gaps)
	}
}

// storedEnd reads the header's stored position straight from the file.
func (d *faultyDisk) storedEnd(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	return h.stored
}

// TestHeaderWriteFailureStopsData simulates one failed header pwrite: the
// writer must stop storing data, since readers still trust the old header.
func TestHeaderWriteFailureStopsData(t *testing.T) {
	w, path := newWriter(t)
	real := w.pwrite
	var headerFails, dataWrites atomic.Int64
	headerFails.Store(1)
	w.pwrite = func(p []byte, off int64) (int, error) {
		if off >= headerSize {
			dataWrites.Add(1)
		} else if headerFails.Add(-1) == 0 {
			return 0, syscall.EIO
		}
		return real(p, off)
	}
	first := make([]byte, 1000)
	fillPos(first, 0)
	w.Write(first)
	before := dataWrites.Load()
	later := make([]byte, 5000)
	fillPos(later, 1000)
	if n, err := w.Write(later); n != len(later) || err != nil {
		t.Fatalf("Write after a failed header = %d, %v", n, err)
	}
	if dataWrites.Load() != before {
		t.Fatal("data written after a header write failed")
	}
	m, err := readMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.ObservedBytes != 6000 || m.RetainedBytes != 1000 || !m.WriteError {
		t.Fatalf("meta %+v", m)
	}
	got := readAll(t, path, 1<<20)
	if !bytes.Equal(got.data, first) || len(got.gaps) != 1 || got.gaps[0] != (Gap{From: 1000, To: 6000}) {
		t.Fatalf("%d bytes, gaps %v", len(got.data), got.gaps)
	}
}

func TestDrain(t *testing.T) {
	data := randomStream(10, headBytes+3*slackBytes+17)
	w, path := newWriter(t)
	if err := Drain(w, iotest.HalfReader(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, path, 1<<20); !got.eof || !bytes.Equal(got.data, data) {
		t.Fatalf("drained %d bytes, want %d", len(got.data), len(data))
	}

	w2, _ := newWriter(t)
	boom := errors.New("boom")
	if err := Drain(w2, io.MultiReader(bytes.NewReader(data[:10]), iotest.ErrReader(boom))); err != boom {
		t.Fatalf("Drain error %v, want %v", err, boom)
	}
	if m := w2.Meta(); m.ObservedBytes != 10 {
		t.Fatalf("observed %d before the read error, want 10", m.ObservedBytes)
	}
}

func TestCreateMode(t *testing.T) {
	_, path := newWriter(t)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	m, err := readMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	checkMeta(t, m, 0, 0, false)
}

func TestWriteDoesNotAllocate(t *testing.T) {
	w, _ := newWriter(t)
	chunk := make([]byte, slackBytes)
	if a := testing.AllocsPerRun(50, func() { w.Write(chunk) }); a != 0 {
		t.Fatalf("Write allocates %.1f times per call", a)
	}
}

func BenchmarkWrite64KiB(b *testing.B) {
	w, _ := newWriter(b)
	chunk := randomStream(11, slackBytes)
	b.SetBytes(slackBytes)
	b.ReportAllocs()
	for b.Loop() {
		w.Write(chunk)
	}
}

func BenchmarkReadPage64KiB(b *testing.B) {
	w, path := newWriter(b)
	writeRandomChunks(b, w, randomStream(12, 5<<20), rand.New(rand.NewPCG(12, 12)), slackBytes)
	if err := w.Seal(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(slackBytes)
	b.ReportAllocs()
	var off int64
	for b.Loop() {
		p, _, err := readPage(path, off, slackBytes)
		if err != nil {
			b.Fatal(err)
		}
		if off = p.NextOffset; p.EOF {
			off = 0
		}
	}
}
