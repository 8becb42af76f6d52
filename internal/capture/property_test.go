package capture

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// model is the reference a capture must match: the whole stream, kept in
// memory, and what a capture of its first n bytes retains.
type model struct{ data []byte }

func (m model) meta(n int64) (observed, retained int64) {
	return n, min(n, headBytes+tailBytes)
}

// mixedChunks cuts total bytes into a random mix of writes: small (as a
// line-buffered program writes), medium (head's 8 KiB and the slack), and
// big (dd's 1 MiB and more than the whole ring at once).
func mixedChunks(rng *rand.Rand, total int) []int {
	var sizes []int
	for left := total; left > 0; {
		var k int
		switch rng.IntN(6) {
		case 0:
			k = 1 + rng.IntN(100)
		case 1:
			k = 1 + rng.IntN(8<<10)
		case 2:
			k = slackBytes - 1 + rng.IntN(3)
		case 3:
			k = 1 << 20
		case 4:
			k = 1 + rng.IntN(2*ringBytes)
		default:
			k = 1 + rng.IntN(256<<10)
		}
		k = min(k, left)
		sizes = append(sizes, k)
		left -= k
	}
	return sizes
}

// feedPaths are the ways a stream reaches a capture: Write, and Drain of a
// pipe, spliced and copied.
var feedPaths = []string{"write", "splice", "copy"}

// TestCaptureMatchesFullCopy feeds random mixes of big and small writes to a
// capture while a reader polls it, and compares everything with the model:
// every byte a page returns is the stream's byte at that offset, no header
// counts bytes the producer has not yet written, the counters are exact at
// each pause of the producer (once published) and at seal, and the sealed
// file holds exactly the model's head and tail.
func TestCaptureMatchesFullCopy(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for _, path := range feedPaths {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("%s/seed%d", path, seed), func(t *testing.T) { checkAgainstModel(t, path, seed) })
		}
	}
}

func checkAgainstModel(t *testing.T, path string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 31))
	// Up to several laps of the ring, and sometimes less than the head.
	total := 2<<20 + rng.IntN(6<<20)
	if seed%3 == 0 {
		total = rng.IntN(headBytes + tailBytes + slackBytes)
	}
	ref := model{data: randomStream(100+seed, total)}
	w, file := newWriter(t)
	var out io.Writer = w
	var drained <-chan error
	if path != "write" {
		var pw *os.File
		pw, drained = drainPipe(t, w, drainPaths[path])
		out = pw
	}

	// produced counts bytes handed to the producer's write before it is
	// called, so it bounds what any header may claim.
	var produced atomic.Int64
	var polled pollStats
	pauses := make(chan int64)
	resume := make(chan struct{})
	producerDone := make(chan error, 1)
	go func() {
		defer close(pauses)
		prng := rand.New(rand.NewPCG(seed, 33))
		var pos int64
		for _, k := range mixedChunks(prng, total) {
			produced.Add(int64(k))
			if _, err := out.Write(ref.data[pos : pos+int64(k)]); err != nil {
				producerDone <- err
				return
			}
			pos += int64(k)
			// Let the reader page between most writes, so that its
			// reads meet the writer at every stage of the stream.
			for seen, t0 := polled.pages.Load(), time.Now(); polled.pages.Load() == seen && time.Since(t0) < 5*time.Millisecond; {
				time.Sleep(20 * time.Microsecond)
			}
			if prng.IntN(40) == 0 {
				pauses <- pos
				<-resume
			}
		}
		if pw, ok := out.(*os.File); ok {
			producerDone <- pw.Close()
			return
		}
		producerDone <- nil
	}()

	stopReader := make(chan struct{})
	readerDone := make(chan error, 1)
	go func() { readerDone <- pollAgainstModel(file, ref, &produced, stopReader, seed, &polled) }()

	paused := 0
	for pos := range pauses {
		paused++
		// The producer is quiet: within the publish bound the header
		// shows every byte, and the live file matches the model.
		m := waitPublished(t, file, pos)
		wantObserved, wantRetained := ref.meta(pos)
		checkMeta(t, m, wantObserved, wantRetained, false)
		got := readAll(t, file, 1+rng.IntN(1<<20))
		want, wantGaps := expectRetained(ref.data[:pos])
		if got.eof || !bytes.Equal(got.data, want) || !equalGaps(got.gaps, wantGaps) {
			t.Fatalf("paused at %d: eof %v, %d bytes (want %d), gaps %v (want %v)", pos, got.eof, len(got.data), len(want), got.gaps, wantGaps)
		}
		resume <- struct{}{}
	}
	if err := <-producerDone; err != nil {
		t.Fatal(err)
	}
	if drained != nil {
		if err := <-drained; err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	close(stopReader)
	if err := <-readerDone; err != nil {
		t.Fatal(err)
	}

	t.Logf("%d bytes, %d pauses; the reader checked %d pages, %d bytes", total, paused, polled.pages.Load(), polled.bytes.Load())
	m, err := readMeta(file)
	if err != nil {
		t.Fatal(err)
	}
	wantObserved, wantRetained := ref.meta(int64(total))
	checkMeta(t, m, wantObserved, wantRetained, true)
	if m != w.Meta() {
		t.Fatalf("sealed header %+v, writer %+v", m, w.Meta())
	}
	want, wantGaps := expectRetained(ref.data)
	for _, maxBytes := range []int{1 + rng.IntN(100000), 1 << 20} {
		got := readAll(t, file, maxBytes)
		if !got.eof || !bytes.Equal(got.data, want) || !equalGaps(got.gaps, wantGaps) {
			t.Fatalf("sealed, max %d: eof %v, %d bytes (want %d), gaps %v (want %v)", maxBytes, got.eof, len(got.data), len(want), got.gaps, wantGaps)
		}
	}
}

// pollAgainstModel pages the live capture until stop, aiming at the head,
// the oldest tail bytes (the next to be overwritten) and the live end, and
// checks each page against the model.
type pollStats struct{ pages, bytes atomic.Int64 }

func pollAgainstModel(file string, ref model, produced *atomic.Int64, stop <-chan struct{}, seed uint64, st *pollStats) error {
	rng := rand.New(rand.NewPCG(seed, 32))
	var follow, lastObserved int64
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		m, err := readMeta(file)
		if err != nil {
			return err
		}
		var off int64
		switch rng.IntN(5) {
		case 0, 1:
			off = max(0, m.ObservedBytes-tailBytes+int64(rng.IntN(2*slackBytes))-slackBytes)
		case 2:
			off = rng.Int64N(min(m.ObservedBytes, headBytes) + 1)
		case 3:
			off = rng.Int64N(m.ObservedBytes + 1)
		default:
			off = follow
		}
		maxBytes := 1 + rng.IntN(tailBytes+slackBytes)
		p, pm, err := readPage(file, off, maxBytes)
		if err != nil {
			return err
		}
		if limit := produced.Load(); pm.ObservedBytes > limit || p.NextOffset > limit {
			return fmt.Errorf("header claims %d bytes, page ends at %d, but only %d were written", pm.ObservedBytes, p.NextOffset, limit)
		}
		if pm.ObservedBytes < lastObserved {
			return fmt.Errorf("observed went back from %d to %d", lastObserved, pm.ObservedBytes)
		}
		lastObserved = pm.ObservedBytes
		if !bytes.Equal(p.Data, ref.data[p.Offset:p.NextOffset]) {
			for i := range p.Data {
				if p.Data[i] != ref.data[p.Offset+int64(i)] {
					return fmt.Errorf("page [%d,%d) of a %d-byte live stream: byte at %d differs from the stream", p.Offset, p.NextOffset, pm.ObservedBytes, p.Offset+int64(i))
				}
			}
		}
		follow = p.NextOffset
		st.pages.Add(1)
		st.bytes.Add(int64(len(p.Data)))
	}
}

func equalGaps(got, want []Gap) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
