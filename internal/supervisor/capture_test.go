package supervisor

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/capture"
)

// TestGiveUpOnEOF is the grace of a job whose descendant keeps stdout open
// and writing after the shell exits: the reads block in the kernel, yet
// finishCapture returns once the grace ends, with the capture finalised as
// incomplete and its header exactly what the writer counted; nothing the
// pipe delivers afterwards is counted.
func TestGiveUpOnEOF(t *testing.T) {
	for _, keepWriting := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "stdout.cap")
		w, err := capture.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		r, descendant, err := capture.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer descendant.Close()
		done := drain(w, r)
		if _, err := descendant.Write([]byte("before the shell exited\n")); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		writing := make(chan struct{})
		go func() {
			defer close(writing)
			chunk := make([]byte, 4096)
			for keepWriting {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := descendant.Write(chunk); err != nil {
					return
				}
			}
		}()

		finished := make(chan struct{})
		go func() {
			finishCapture(r, done, w, time.Now().Add(200*time.Millisecond))
			close(finished)
		}()
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Fatal("finishCapture did not give up after its grace")
		}
		final := w.Meta()
		if final.Complete || final.ObservedBytes < 24 {
			t.Fatalf("keep writing %v: final meta %+v", keepWriting, final)
		}
		onDisk, err := readMeta(path)
		if err != nil || onDisk != final {
			t.Fatalf("keep writing %v: header %+v (%v), result would say %+v", keepWriting, onDisk, err, final)
		}
		time.Sleep(20 * time.Millisecond)
		// Either nobody reads it any more, or the read end is closed by
		// now (EPIPE): both leave the capture as it was.
		descendant.Write([]byte("after"))
		time.Sleep(20 * time.Millisecond)
		close(stop)
		<-writing
		if m, err := readMeta(path); err != nil || m != final || w.Meta() != final {
			t.Fatalf("keep writing %v: output after the give-up changed the capture: header %+v (%v), writer %+v, final %+v", keepWriting, m, err, w.Meta(), final)
		}
	}
}

// TestEOFWithinGraceSeals: a stream that ends within the grace is sealed
// complete with every byte.
func TestEOFWithinGraceSeals(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stdout.cap")
	w, err := capture.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, pw, err := capture.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := drain(w, r)
	if _, err := pw.Write(make([]byte, 100000)); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	finishCapture(r, done, w, time.Now().Add(captureGrace))
	if m, err := readMeta(path); err != nil || !m.Complete || m.ObservedBytes != 100000 {
		t.Fatalf("meta %+v, %v", m, err)
	}
}

// readMeta reads the capture metadata of the file at path.
func readMeta(path string) (capture.Meta, error) {
	f, err := os.Open(path)
	if err != nil {
		return capture.Meta{}, err
	}
	defer f.Close()
	return capture.ReadMeta(f)
}
