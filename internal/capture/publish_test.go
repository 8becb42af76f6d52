package capture

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
)

// recordHeaders makes w's pwrite note the stored end of every header it
// writes, and returns that record.
func recordHeaders(t *testing.T, w *Writer) *[]int64 {
	t.Helper()
	var published []int64
	real := w.pwrite
	w.pwrite = func(p []byte, off int64) (int, error) {
		if off == 0 {
			h, err := decodeHeader(p)
			if err != nil {
				t.Errorf("writing an undecodable header: %v", err)
			}
			published = append(published, h.stored)
		}
		return real(p, off)
	}
	return &published
}

// TestUnpublishedBytesUseTheWholeSlack: a writer that publishes lazily (as
// Drain does) stores up to exactly the 64 KiB slack past the last header
// without publishing, and publishes before the byte that would overrun it;
// the splice path's reservation grants what is left of the slack, and a
// whole slack after publishing once it is used up.
func TestUnpublishedBytesUseTheWholeSlack(t *testing.T) {
	w, _ := newWriter(t)
	published := recordHeaders(t, w)
	writePos(t, w, 0, 40000) // Write publishes: the header is at 40000
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	buf := make([]byte, slackBytes)
	steps := []struct {
		n    int
		want []int64 // headers written so far
	}{
		{3000, []int64{40000}},      // 3000 past the header
		{62536, []int64{40000}},     // exactly 64 KiB past it: still no header
		{1, []int64{40000, 105536}}, // the next byte would overrun
	}
	for _, s := range steps {
		pos := w.h.stored
		fillPos(buf[:s.n], pos)
		w.append(buf[:s.n], now)
		if !slices.Equal(*published, s.want) {
			t.Fatalf("after storing [%d,%d): headers at %v, want %v", pos, pos+int64(s.n), *published, s.want)
		}
	}

	// Stored 105537, published 105536: one byte of the slack is used.
	off, k, err := w.reserve()
	if err != nil || off != headerSize+105537 || k != 65535 {
		t.Fatalf("reserve with 1 byte unpublished = %d, %d, %v; want %d, 65535", off, k, err, headerSize+105537)
	}
	if want := []int64{40000, 105536}; !slices.Equal(*published, want) {
		t.Fatalf("reserve within the slack wrote headers %v, want %v", *published, want)
	}
	fillPos(buf[:65535], w.h.stored)
	w.append(buf[:65535], now) // exactly at the slack again
	off, k, err = w.reserve()
	if err != nil || off != headerSize+171072 || k != slackBytes {
		t.Fatalf("reserve with the slack used up = %d, %d, %v; want %d, %d", off, k, err, headerSize+171072, slackBytes)
	}
	if want := []int64{40000, 105536, 171072}; !slices.Equal(*published, want) {
		t.Fatalf("reserve with the slack used up wrote headers %v, want %v", *published, want)
	}
}

// TestPacePublishesOnceTheHeaderIsAnIntervalOld: Drain's pacing publishes
// unpublished bytes at once when the last header is at least
// CapturePublishInterval old, and not a nanosecond before.
func TestPacePublishesOnceTheHeaderIsAnIntervalOld(t *testing.T) {
	w, path := newWriter(t)
	w.mu.Lock()
	// Unlocked before w.Close, and before the quiet timer this arms can
	// run; it finds nothing left to publish.
	defer w.mu.Unlock()
	last := w.lastPublish
	data := make([]byte, 1000)
	fillPos(data, 0)
	w.append(data, last)
	w.pace(last.Add(limits.CapturePublishInterval - time.Nanosecond))
	if m, err := readMeta(path); err != nil || m.ObservedBytes != 0 {
		t.Fatalf("header %+v (%v) one nanosecond before the interval; want it unpublished", m, err)
	}
	w.pace(last.Add(limits.CapturePublishInterval))
	if m, err := readMeta(path); err != nil || m.ObservedBytes != 1000 {
		t.Fatalf("header %+v (%v) once the header is an interval old; want 1000 observed", m, err)
	}
}

// TestNothingToPublishWritesNoHeader: Close publishes only counters that
// moved since the last header, and never touches a sealed file's header.
func TestNothingToPublishWritesNoHeader(t *testing.T) {
	for _, seal := range []bool{false, true} {
		w, path := newWriter(t)
		published := recordHeaders(t, w)
		writePos(t, w, 0, 1000)
		want := []int64{1000}
		if seal {
			if err := w.Seal(); err != nil {
				t.Fatal(err)
			}
			want = append(want, 1000)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(*published, want) {
			t.Fatalf("sealed %v: headers at %v, want %v", seal, *published, want)
		}
		m, err := readMeta(path)
		if err != nil {
			t.Fatal(err)
		}
		checkMeta(t, m, 1000, 1000, seal)
	}
}

// TestShortWritesAreWriteErrors: a pwrite that reports fewer bytes than it
// was given, without an error, failed as much as one that reports an error:
// a short data write ends retention where the last whole piece ended, and a
// short header write stops data and fails Seal.
func TestShortWritesAreWriteErrors(t *testing.T) {
	t.Run("data", func(t *testing.T) {
		w, path := newWriter(t)
		real := w.pwrite
		dataWrites := 0
		w.pwrite = func(p []byte, off int64) (int, error) {
			if off >= headerSize {
				if dataWrites++; dataWrites == 2 {
					return real(p[:len(p)/2], off)
				}
			}
			return real(p, off)
		}
		for pos := int64(0); pos < 3000; pos += 1000 {
			writePos(t, w, pos, pos+1000)
		}
		if err := w.Seal(); err != nil {
			t.Fatal(err)
		}
		m, err := readMeta(path)
		if err != nil {
			t.Fatal(err)
		}
		if m.ObservedBytes != 3000 || m.RetainedBytes != 1000 || !m.WriteError || !m.Complete {
			t.Fatalf("meta %+v, want 3000 observed, 1000 retained, a write error", m)
		}
		want := make([]byte, 1000)
		fillPos(want, 0)
		got := readAll(t, path, 1<<20)
		if !bytes.Equal(got.data, want) || !equalGaps(got.gaps, []Gap{{From: 1000, To: 3000}}) {
			t.Fatalf("%d bytes, gaps %v; want the first 1000 and a gap [1000,3000)", len(got.data), got.gaps)
		}
	})
	t.Run("header", func(t *testing.T) {
		w, path := newWriter(t)
		real := w.pwrite
		var shortHeader bool
		dataWrites := 0
		w.pwrite = func(p []byte, off int64) (int, error) {
			if off >= headerSize {
				dataWrites++
			} else if shortHeader {
				return 0, nil
			}
			return real(p, off)
		}
		writePos(t, w, 0, 1000)
		shortHeader = true
		writePos(t, w, 1000, 2000) // stored, but its header is not
		before := dataWrites
		writePos(t, w, 2000, 3000)
		if dataWrites != before {
			t.Fatal("data written after a short header write")
		}
		if m, err := readMeta(path); err != nil || m.ObservedBytes != 1000 || m.WriteError {
			t.Fatalf("header on disk %+v (%v); want the last whole one, 1000 observed", m, err)
		}
		if m := w.Meta(); m.ObservedBytes != 3000 || m.RetainedBytes != 2000 || !m.WriteError {
			t.Fatalf("writer meta %+v; want 3000 observed, 2000 retained, a write error", m)
		}
		if err := w.Seal(); !errors.Is(err, io.ErrShortWrite) {
			t.Fatalf("Seal with a short header write: %v, want io.ErrShortWrite", err)
		}
	})
}
