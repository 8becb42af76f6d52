package capture

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/limits"
)

// drainPaths are Drain's two ways of taking a pipe: spliced into the file
// (an *os.File) and copied through a buffer (any other reader).
var drainPaths = map[string]func(*os.File) io.Reader{
	"splice": func(f *os.File) io.Reader { return f },
	"copy":   func(f *os.File) io.Reader { return struct{ io.Reader }{f} },
}

// drainPipe runs Drain from a new Pipe into w and returns the pipe's write
// end, for the test to produce into, and Drain's result.
func drainPipe(t *testing.T, w *Writer, path func(*os.File) io.Reader) (*os.File, <-chan error) {
	t.Helper()
	r, pw, err := Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Drain(w, path(r)) }()
	t.Cleanup(func() {
		pw.Close()
		r.Close()
	})
	return pw, done
}

// produce writes data into pw in chunks of [1, maxChunk] bytes.
func produce(t *testing.T, pw *os.File, data []byte, rng *rand.Rand, maxChunk int) {
	t.Helper()
	for len(data) > 0 {
		k := min(len(data), 1+rng.IntN(maxChunk))
		if _, err := pw.Write(data[:k]); err != nil {
			t.Fatal(err)
		}
		data = data[k:]
	}
}

// waitPublished waits until the header on disk shows observed bytes; the
// deadline is generous, for a loaded machine, and only a header that is
// never published misses it.
func waitPublished(t *testing.T, path string, observed int64) Meta {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := readMeta(path)
		if err != nil {
			t.Fatal(err)
		}
		if m.ObservedBytes == observed {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("header shows %d observed bytes, want %d", m.ObservedBytes, observed)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestDrainedPipeReaderNeverSeesLappedBytes is the lapping test with the
// stream arriving through a pipe, which Drain publishes lazily.
func TestDrainedPipeReaderNeverSeesLappedBytes(t *testing.T) {
	for name, path := range drainPaths {
		t.Run(name, func(t *testing.T) {
			w, file := newWriter(t)
			pw, drained := drainPipe(t, w, path)
			var stop atomic.Bool
			produced := make(chan error, 1)
			go func() {
				rng := rand.New(rand.NewPCG(7, 8))
				buf := make([]byte, 2*slackBytes)
				for pos := int64(0); !stop.Load(); {
					c := buf[:1+rng.IntN(len(buf))]
					fillPos(c, pos)
					if _, err := pw.Write(c); err != nil {
						produced <- err
						return
					}
					pos += int64(len(c))
				}
				produced <- pw.Close()
			}()
			pageWhileWriting(t, w, file, func() error {
				stop.Store(true)
				if err := <-produced; err != nil {
					return err
				}
				if err := <-drained; err != nil {
					return err
				}
				return w.Seal()
			})
		})
	}
}

// TestQuietStreamBecomesVisible: a producer that writes and then goes quiet
// without closing its pipe still has every byte published, by the timer,
// since no further read comes to publish them.
func TestQuietStreamBecomesVisible(t *testing.T) {
	for name, path := range drainPaths {
		t.Run(name, func(t *testing.T) {
			w, file := newWriter(t)
			pw, _ := drainPipe(t, w, path)
			data := randomStream(20, slackBytes+1001)
			// Small writes in quick succession, so most land within one
			// publish interval of the previous header; the last one
			// crosses the slack, publishing what came before it.
			for _, c := range [][]byte{data[:1], data[1:1001], data[1001:]} {
				if _, err := pw.Write(c); err != nil {
					t.Fatal(err)
				}
			}
			for w.Meta().ObservedBytes != int64(len(data)) {
				time.Sleep(50 * time.Microsecond)
			}
			t0 := time.Now()
			m := waitPublished(t, file, int64(len(data)))
			t.Logf("last bytes published %v after Drain counted them (bound %v)", time.Since(t0), limits.CapturePublishInterval)
			if m != w.Meta() || m.Complete {
				t.Fatalf("published %+v, writer has %+v", m, w.Meta())
			}
			if got := readAll(t, file, 1<<20); got.eof || !bytes.Equal(got.data, data) {
				t.Fatalf("read %d bytes (eof %v), want %d", len(got.data), got.eof, len(data))
			}
		})
	}
}

// TestDrainCountsExactly: when the producer closes its pipe, Drain returns
// with the header on disk equal to the writer's counters, and Seal makes
// them final.
func TestDrainCountsExactly(t *testing.T) {
	for name, path := range drainPaths {
		t.Run(name, func(t *testing.T) {
			for _, total := range []int{0, 1, slackBytes + 7, headBytes + tailBytes + 3*slackBytes + 12345} {
				w, file := newWriter(t)
				pw, drained := drainPipe(t, w, path)
				data := randomStream(21, total)
				produce(t, pw, data, rand.New(rand.NewPCG(21, uint64(total))), 100000)
				pw.Close()
				if err := <-drained; err != nil {
					t.Fatal(err)
				}
				m, err := readMeta(file)
				if err != nil {
					t.Fatal(err)
				}
				if m != w.Meta() {
					t.Fatalf("%d bytes: header %+v after Drain, writer %+v", total, m, w.Meta())
				}
				want, wantGaps := expectRetained(data)
				checkMeta(t, m, int64(total), int64(len(want)), false)
				if err := w.Seal(); err != nil {
					t.Fatal(err)
				}
				m, err = readMeta(file)
				if err != nil {
					t.Fatal(err)
				}
				checkMeta(t, m, int64(total), int64(len(want)), true)
				got := readAll(t, file, 1<<20)
				if !got.eof || !bytes.Equal(got.data, want) || len(got.gaps) != len(wantGaps) {
					t.Fatalf("%d bytes: eof %v, read %d (want %d), gaps %v", total, got.eof, len(got.data), len(want), got.gaps)
				}
			}
		})
	}
}

// TestDrainStoresAtMostTheSlackPastTheHeader watches every store and every
// published header of a fast stream: bytes on disk never run more than the
// ring's slack past the published end, which is what keeps the published
// tail window intact for readers and after a crash.
func TestDrainStoresAtMostTheSlackPastTheHeader(t *testing.T) {
	for name, path := range drainPaths {
		t.Run(name, func(t *testing.T) {
			w, _ := newWriter(t)
			var stored, published, headers, stores atomic.Int64
			var worst atomic.Int64
			check := func(n int64) {
				stores.Add(1)
				if ahead := stored.Add(n) - published.Load(); ahead > worst.Load() {
					worst.Store(ahead)
				}
			}
			realPwrite, realSplice, realRead := w.pwrite, w.splice, w.read
			w.pwrite = func(p []byte, off int64) (int, error) {
				n, err := realPwrite(p, off)
				if off == 0 {
					h, herr := decodeHeader(p)
					if herr != nil {
						t.Errorf("published an undecodable header: %v", herr)
					}
					headers.Add(1)
					published.Store(h.stored)
				} else {
					check(int64(n))
				}
				return n, err
			}
			w.splice = func(rfd int, roff *int64, wfd int, woff *int64, n int, flags int) (int64, error) {
				k, err := realSplice(rfd, roff, wfd, woff, n, flags)
				if k > 0 {
					check(k)
				}
				return k, err
			}
			w.read = func(fd int, p []byte) (int, error) {
				k, err := realRead(fd, p)
				if k > 0 {
					check(int64(k))
				}
				return k, err
			}
			pw, drained := drainPipe(t, w, path)
			const total, write = 8 << 20, 4 << 10
			data := make([]byte, total)
			fillPos(data, 0)
			produce(t, pw, data, rand.New(rand.NewPCG(22, 22)), write)
			pw.Close()
			if err := <-drained; err != nil {
				t.Fatal(err)
			}
			if got := stored.Load(); got != total {
				t.Fatalf("%d bytes stored, want %d", got, total)
			}
			if worst.Load() > slackBytes {
				t.Fatalf("stored %d bytes past the published end; the ring's slack is %d", worst.Load(), slackBytes)
			}
			t.Logf("%d stores, %d headers for %d bytes; at most %d bytes past the header", stores.Load(), headers.Load(), total, worst.Load())
		})
	}
}

// spliceDisk is a splice and read seam that fills the disk: once budget
// bytes are stored it returns a short count, then fails as a full file
// system does: splice with ENOSPC, a read into the ring's mapping with
// EFAULT (its page cannot be made writable).
type spliceDisk struct {
	budget int64
	calls  int // splices and reads attempted after the failure
	reads  int // reads into the mapping
	failed bool
}

func (d *spliceDisk) read(fd int, p []byte) (int, error) {
	d.reads++
	if d.failed {
		d.calls++
		return 0, syscall.EFAULT
	}
	if d.budget == 0 {
		d.failed = true
		return 0, syscall.EFAULT
	}
	k, err := unix.Read(fd, p[:min(int64(len(p)), d.budget)])
	d.budget -= int64(max(k, 0))
	return k, err
}

func (d *spliceDisk) splice(rfd int, roff *int64, wfd int, woff *int64, n int, flags int) (int64, error) {
	if d.failed {
		d.calls++
		return 0, syscall.ENOSPC
	}
	if d.budget == 0 {
		d.failed = true
		return 0, syscall.ENOSPC
	}
	k, err := unix.Splice(rfd, roff, wfd, woff, int(min(int64(n), d.budget)), flags)
	d.budget -= k
	return k, err
}

// TestDiskFullWhileSplicing: retention stops where the disk filled, exactly,
// and Drain goes on counting the rest of the stream, whether the disk fills
// while the pipe is spliced (head, first lap of the ring) or while it is
// read into the ring's mapping (later laps).
func TestDiskFullWhileSplicing(t *testing.T) {
	const total = 3 << 20
	for _, allowed := range []int64{1000, headBytes + 1, headBytes + tailBytes + 100000, headBytes + ringBytes, headBytes + ringBytes + 1, headBytes + 2*ringBytes} {
		w, file := newWriter(t)
		disk := &spliceDisk{budget: allowed}
		w.splice, w.read = disk.splice, disk.read
		pw, drained := drainPipe(t, w, drainPaths["splice"])
		data := randomStream(23, total)
		produce(t, pw, data, rand.New(rand.NewPCG(23, uint64(allowed))), 2*slackBytes)
		pw.Close()
		if err := <-drained; err != nil {
			t.Fatal(err)
		}
		if err := w.Seal(); err != nil {
			t.Fatal(err)
		}
		if disk.calls != 0 {
			t.Fatalf("allowed %d: %d splices or reads after the disk filled", allowed, disk.calls)
		}
		if mapped := disk.reads > 0; mapped != (allowed >= headBytes+ringBytes) {
			t.Fatalf("allowed %d: %d reads into the ring's mapping", allowed, disk.reads)
		}
		m, err := readMeta(file)
		if err != nil {
			t.Fatal(err)
		}
		want, wantGaps := expectRetained(data[:allowed])
		wantGaps = append(wantGaps, Gap{From: allowed, To: total})
		if m.ObservedBytes != total || !m.WriteError || !m.Complete || m.RetainedBytes != int64(len(want)) {
			t.Fatalf("allowed %d: meta %+v, want %d retained", allowed, m, len(want))
		}
		got := readAll(t, file, 1<<20)
		if !got.eof || !bytes.Equal(got.data, want) || len(got.gaps) != len(wantGaps) {
			t.Fatalf("allowed %d: eof %v, read %d (want %d), gaps %v (want %v)", allowed, got.eof, len(got.data), len(want), got.gaps, wantGaps)
		}
		for i := range wantGaps {
			if got.gaps[i] != wantGaps[i] {
				t.Fatalf("allowed %d: gaps %v, want %v", allowed, got.gaps, wantGaps)
			}
		}
	}
}

// TestDrainOfAFileCopies: a reader that is a file but no pipe cannot be
// spliced; Drain copies it instead.
func TestDrainOfAFileCopies(t *testing.T) {
	data := randomStream(24, headBytes+slackBytes+99)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, file := newWriter(t)
	if err := Drain(w, f); err != nil {
		t.Fatal(err)
	}
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, file, 1<<20); !got.eof || !bytes.Equal(got.data, data) {
		t.Fatalf("read %d bytes, want %d", len(got.data), len(data))
	}
}

// TestCloseUnderABlockedDrain is giving up on EOF: the producer's pipe stays
// open and quiet, so Drain is blocked in the kernel when the writer is
// closed (in a splice, or in a read into the ring's mapping once the stream
// is past the first lap). Close publishes what was counted; what the pipe
// delivers later is refused, not counted, and leaves the retained bytes
// alone, and Drain ends.
func TestCloseUnderABlockedDrain(t *testing.T) {
	for name, path := range drainPaths {
		t.Run(name, func(t *testing.T) {
			w, file := newWriter(t)
			pw, drained := drainPipe(t, w, path)
			data := randomStream(25, headBytes+ringBytes+5000)
			if _, err := pw.Write(data); err != nil {
				t.Fatal(err)
			}
			for w.Meta().ObservedBytes != int64(len(data)) {
				time.Sleep(50 * time.Microsecond)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			final := w.Meta()
			if m, err := readMeta(file); err != nil || m != final || m.ObservedBytes != int64(len(data)) || m.Complete {
				t.Fatalf("after Close: header %+v (%v), writer %+v", m, err, final)
			}
			if _, err := pw.Write([]byte("late output")); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-drained:
				if !errors.Is(err, os.ErrClosed) {
					t.Fatalf("Drain ended with %v, want a closed-writer error", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Drain did not end after the writer was closed")
			}
			if m, err := readMeta(file); err != nil || m != final || w.Meta() != final {
				t.Fatalf("late output changed the capture: header %+v (%v), writer %+v, final %+v", m, err, w.Meta(), final)
			}
			want, _ := expectRetained(data)
			if got := readAll(t, file, 1<<20); !bytes.Equal(got.data, want) {
				t.Fatal("late output changed the retained bytes")
			}
		})
	}
}

// BenchmarkDrainPipe captures 256 MiB from a real producer through a pipe,
// spliced and copied, and reports this process's CPU time per MiB (Drain's
// cost: the producer is another process).
func BenchmarkDrainPipe(b *testing.B) {
	producers := []struct{ name, cmd string }{
		{"head-8KiB", "head -c 268435456 /dev/zero"},
		{"dd-1MiB", "dd if=/dev/zero bs=1M count=256 status=none"},
	}
	for _, p := range producers {
		for _, name := range []string{"splice", "copy", "discard"} {
			b.Run(p.name+"/"+name, func(b *testing.B) {
				b.SetBytes(256 << 20)
				var cpu time.Duration
				for range b.N {
					w, err := Create(filepath.Join(b.TempDir(), "stdout.cap"))
					if err != nil {
						b.Fatal(err)
					}
					r, pw, err := Pipe()
					if err != nil {
						b.Fatal(err)
					}
					// The supervisor's pipe size (supervisor.pipeSize).
					unix.FcntlInt(r.Fd(), unix.F_SETPIPE_SZ, 256<<10)
					cmd := exec.Command("/bin/sh", "-c", p.cmd)
					cmd.Stdout = pw
					if err := cmd.Start(); err != nil {
						b.Fatal(err)
					}
					pw.Close()
					before := selfCPU()
					if name == "discard" { // what cat > /dev/null does
						buf := make([]byte, 128<<10)
						for {
							if n, _ := r.Read(buf); n == 0 {
								break
							}
						}
					} else if err := Drain(w, drainPaths[name](r)); err != nil {
						b.Fatal(err)
					}
					cpu += selfCPU() - before
					cmd.Wait()
					r.Close()
					w.Seal()
					w.Close()
				}
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/256, "cpu-µs/MiB")
			})
		}
	}
}

func selfCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// filledPipe returns the read end of a pipe that holds data and whose write
// end is closed, so that Drain alone decides how much of it to take.
func filledPipe(t *testing.T, data []byte) *os.File {
	t.Helper()
	r, pw, err := Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if len(data) > 64<<10 {
		if _, err := unix.FcntlInt(pw.Fd(), unix.F_SETPIPE_SZ, len(data)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDrainCountsTheWholeStreamAfterAHeaderWriteFails: once a header
// cannot be written, Drain stops storing but goes on taking the stream to
// its end, counting every byte, rather than stop at the write error and
// leave the producer blocked on a full pipe.
func TestDrainCountsTheWholeStreamAfterAHeaderWriteFails(t *testing.T) {
	const total = 256 << 10
	for name, path := range drainPaths {
		t.Run(name, func(t *testing.T) {
			w, file := newWriter(t)
			real := w.pwrite
			w.pwrite = func(p []byte, off int64) (int, error) {
				if off == 0 {
					return 0, syscall.EIO
				}
				return real(p, off)
			}
			data := make([]byte, total)
			fillPos(data, 0)
			if err := Drain(w, path(filledPipe(t, data))); err != nil {
				t.Fatal(err)
			}
			// The first header is due at 64 KiB at the latest; nothing
			// is stored past it.
			if m := w.Meta(); m.ObservedBytes != total || !m.WriteError || m.RetainedBytes <= 0 || m.RetainedBytes > slackBytes {
				t.Fatalf("writer meta %+v; want %d observed, a write error, at most %d retained", m, total, slackBytes)
			}
			if m, err := readMeta(file); err != nil || m.ObservedBytes != 0 {
				t.Fatalf("header on disk %+v (%v); want the empty one Create wrote", m, err)
			}
		})
	}
}

// TestDrainIntoASealedWriterChangesNothing: a sealed capture is final; a
// Drain started after Seal is refused and stores nothing in the file.
func TestDrainIntoASealedWriterChangesNothing(t *testing.T) {
	for name, path := range drainPaths {
		t.Run(name, func(t *testing.T) {
			w, file := newWriter(t)
			writePos(t, w, 0, 100)
			if err := w.Seal(); err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := Drain(w, path(filledPipe(t, []byte("late output")))); !errors.Is(err, os.ErrClosed) {
				t.Fatalf("Drain after Seal: %v, want a closed-writer error", err)
			}
			after, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, before) {
				t.Fatalf("Drain after Seal changed the file: %d bytes, were %d", len(after), len(before))
			}
			checkMeta(t, w.Meta(), 100, 100, true)
		})
	}
}

// mappings returns this process's mappings of the file at path, as file
// offset ranges.
func mappings(path string) ([][2]int64, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	var ranges [][2]int64
	for _, line := range strings.Split(string(maps), "\n") {
		// start-end perms offset dev inode path
		f := strings.Fields(line)
		if len(f) != 6 || f[5] != path {
			continue
		}
		var start, end, off int64
		if _, err := fmt.Sscanf(f[0]+" "+f[2], "%x-%x %x", &start, &end, &off); err != nil {
			return nil, err
		}
		ranges = append(ranges, [2]int64{off, off + end - start})
	}
	return ranges, err
}

// TestDrainMapsOnlyTheRingAndUnmapsIt: Drain maps the ring alone, from its
// file offset (4096 + 512 KiB, rounded down to a page) to the ring's end,
// and the mapping ends with the Drain that made it; left behind, it would
// pin the file's pages (and a deleted capture's disk space) for the life of
// the supervisor.
func TestDrainMapsOnlyTheRingAndUnmapsIt(t *testing.T) {
	w, file := newWriter(t)
	file, err := filepath.EvalSymlinks(file) // as /proc/self/maps names it
	if err != nil {
		t.Fatal(err)
	}
	page := int64(os.Getpagesize())
	want := [2]int64{(4096 + 512<<10) / page * page, (4096 + 512<<10 + 576<<10 + page - 1) / page * page}
	realRead := w.read
	var seen [][2]int64
	w.read = func(fd int, p []byte) (int, error) {
		if seen == nil { // Drain's reads run one at a time
			m, err := mappings(file)
			if err != nil {
				t.Error(err)
			}
			seen = m
		}
		return realRead(fd, p)
	}
	pw, drained := drainPipe(t, w, drainPaths["splice"])
	data := make([]byte, headBytes+ringBytes+3*slackBytes)
	fillPos(data, 0)
	produce(t, pw, data, rand.New(rand.NewPCG(26, 26)), slackBytes)
	pw.Close()
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != want {
		t.Fatalf("while Drain read into the ring, the file was mapped at %v; want [%v]", seen, want)
	}
	if m, err := mappings(file); err != nil || len(m) != 0 {
		t.Fatalf("mapped at %v after Drain returned (%v)", m, err)
	}
}

// TestCopyingDrainReportsAReadErrorAfterClose: once the writer is closed,
// Drain's closed-writer error means output was refused; a reader that fails
// without delivering a byte has its own error reported.
func TestCopyingDrainReportsAReadErrorAfterClose(t *testing.T) {
	w, _ := newWriter(t)
	writePos(t, w, 0, 100)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := Drain(w, iotest.ErrReader(boom)); err != boom {
		t.Fatalf("Drain of a failing reader after Close: %v, want %v", err, boom)
	}
	if err := Drain(w, strings.NewReader("late output")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Drain of late output after Close: %v, want a closed-writer error", err)
	}
	checkMeta(t, w.Meta(), 100, 100, false)
}
