package jobinput

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/terminal"
)

// deepDir returns a directory whose socket path is longer than a socket
// address can hold, as a job directory under a deep home can be.
func deepDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if n := len(filepath.Join(dir, SocketFile)); n <= 108 {
		t.Fatalf("path of %d bytes is not deep enough", n)
	}
	return dir
}

func serve(t *testing.T, dir string, sink Sink) *Listener {
	t.Helper()
	l, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	l.Serve(sink)
	t.Cleanup(l.Close)
	return l
}

func offsets(out, errs int64) func() (int64, int64) {
	return func() (int64, int64) { return out, errs }
}

func TestWritesArriveInOrderThenEOFClosesStdin(t *testing.T) {
	dir := deepDir(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	serve(t, dir, Sink{W: w, Offsets: offsets(7, 3)})

	fi, err := os.Stat(filepath.Join(dir, SocketFile))
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v (%v), want an owner-only socket", fi.Mode(), err)
	}
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(r); got <- b }()
	for _, s := range []string{"one\n", "two\n", ""} {
		rep, err := Send(dir, Request{Data: []byte(s)})
		if err != nil {
			t.Fatalf("send %q: %v", s, err)
		}
		if rep.Accepted != len(s) || rep.StdoutOffset != 7 || rep.StderrOffset != 3 {
			t.Fatalf("reply %+v for %q", rep, s)
		}
	}
	if _, err := Send(dir, Request{Data: []byte("three\n"), EOF: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if string(b) != "one\ntwo\nthree\n" {
			t.Fatalf("stdin got %q", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("eof did not close stdin")
	}
	rep, err := Send(dir, Request{Data: []byte("late")})
	if !errors.Is(err, ErrClosed) || rep.Accepted != 0 {
		t.Fatalf("after eof: %+v, %v; want ErrClosed", rep, err)
	}
	if _, err := Send(dir, Request{Resize: &terminal.Size{Cols: 80, Rows: 24}}); !errors.Is(err, ErrNotTerminal) {
		t.Fatalf("resize of a pipe: %v, want ErrNotTerminal", err)
	}
}

func TestAJobThatClosedItsStdinClosesTheChannel(t *testing.T) {
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	serve(t, dir, Sink{W: w, Offsets: offsets(0, 0)})
	if _, err := Send(dir, Request{Data: []byte("x")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("send to a closed reader: %v, want ErrClosed", err)
	}
}

func TestAJobThatDoesNotReadTakesPartOfTheInput(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the input write timeout")
	}
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Fill the pipe but for one page. (SyscallConn: Fd would make the
	// write end blocking, and its deadline meaningless.)
	var size int
	rc, _ := w.SyscallConn()
	rc.Control(func(fd uintptr) { size, err = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, size-4096)); err != nil {
		t.Fatal(err)
	}
	serve(t, dir, Sink{W: w, Offsets: offsets(0, 0)})
	const sent = 10000
	rep, err := Send(dir, Request{Data: make([]byte, sent), EOF: true})
	if err != nil || rep.Accepted <= 0 || rep.Accepted >= sent {
		t.Fatalf("reply %+v, %v; want part of %d bytes accepted", rep, err, sent)
	}
	// The partial write did not close stdin: the rest can follow.
	if _, err := io.ReadFull(r, make([]byte, size-4096+rep.Accepted)); err != nil {
		t.Fatal(err)
	}
	rest := sent - rep.Accepted
	if rep, err := Send(dir, Request{Data: make([]byte, rest)}); err != nil || rep.Accepted != rest {
		t.Fatalf("rest: %+v, %v; want %d accepted", rep, err, rest)
	}
}

func TestTerminalResizeAndEOF(t *testing.T) {
	dir := t.TempDir()
	master, slave, err := terminal.Open(terminal.Size{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer slave.Close()
	serve(t, dir, Sink{W: master, Terminal: true, Offsets: offsets(0, 0)})
	if _, err := Send(dir, Request{Resize: &terminal.Size{Cols: 100, Rows: 30}}); err != nil {
		t.Fatal(err)
	}
	ws, err := unix.IoctlGetWinsize(int(slave.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col != 100 || ws.Row != 30 {
		t.Fatalf("size %+v (%v), want 100x30", ws, err)
	}
	if _, err := Send(dir, Request{Data: []byte("ab\n"), EOF: true}); err != nil {
		t.Fatal(err)
	}
	// Canonical mode: the line, then end-of-file as an empty read.
	buf := make([]byte, 64)
	n, err := slave.Read(buf)
	if err != nil || string(buf[:n]) != "ab\n" {
		t.Fatalf("slave read %q, %v", buf[:n], err)
	}
	if n, err = slave.Read(buf); n != 0 {
		t.Fatalf("after eof read %q, %v; want end-of-file", buf[:n], err)
	}
	if _, err := Send(dir, Request{Data: []byte("x")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after eof: %v, want ErrClosed", err)
	}
}

func TestSendToAnEndedJobIsGone(t *testing.T) {
	dir := t.TempDir()
	if _, err := Send(dir, Request{Data: []byte("x")}); !errors.Is(err, ErrGone) {
		t.Fatalf("no socket: %v, want ErrGone", err)
	}
	_, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	l := serve(t, dir, Sink{W: w, Offsets: offsets(0, 0)})
	l.Close()
	if _, err := Send(dir, Request{Data: []byte("x")}); !errors.Is(err, ErrGone) {
		t.Fatalf("closed listener: %v, want ErrGone", err)
	}
	// A symlink in the socket's place is not followed.
	other := t.TempDir()
	l2 := serve(t, other, Sink{W: w, Offsets: offsets(0, 0)})
	defer l2.Close()
	if err := os.Symlink(filepath.Join(other, SocketFile), filepath.Join(dir, SocketFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Send(dir, Request{Data: []byte("x")}); err == nil {
		t.Fatal("a symlinked socket was followed")
	}
}

func TestOversizedInputIsRefusedBeforeSending(t *testing.T) {
	if _, err := Send(t.TempDir(), Request{Data: make([]byte, 65537)}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("65537 bytes: %v, want ErrMalformed", err)
	}
	if _, err := encodeRequest(Request{Data: make([]byte, limits.MaxInputBytes)}); err != nil {
		t.Fatalf("64 KiB refused: %v", err)
	}
}

func TestAMalformedFrameIsRefused(t *testing.T) {
	dir := t.TempDir()
	_, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	serve(t, dir, Sink{W: w, Offsets: offsets(0, 0)})
	frame, _ := encodeRequest(Request{Data: []byte("hi")})
	frame[3] = 9
	rep, err := exchangeRaw(dir, frame)
	if !errors.Is(err, ErrRefused) || rep.Accepted != 0 {
		t.Fatalf("unknown op: %+v, %v; want ErrRefused", rep, err)
	}
}

func exchangeRaw(dir string, frame []byte) (Reply, error) {
	c, err := dial(dir, time.Now().Add(5*time.Second))
	if err != nil {
		return Reply{}, err
	}
	defer c.Close()
	c.Write(frame)
	return readReply(c)
}

func FuzzReadRequest(f *testing.F) {
	for _, r := range []Request{{Data: []byte("hello\n")}, {EOF: true}, {Resize: &terminal.Size{Cols: 80, Rows: 24}}} {
		b, _ := encodeRequest(r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := readRequest(bytes.NewReader(b), nil)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		again, err := encodeRequest(req)
		if err != nil {
			t.Fatalf("decoded request does not encode: %v", err)
		}
		if !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("round trip differs: %x vs %x", again, b[:len(again)])
		}
	})
}

func FuzzReadReply(f *testing.F) {
	f.Add(encodeReply(statusOK, Reply{Accepted: 5, StdoutOffset: 10, StderrOffset: 2}))
	f.Add(encodeReply(statusClose, Reply{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := readReply(bytes.NewReader(b))
		if err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrGone) && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotTerminal) && !errors.Is(err, ErrRefused) {
			t.Fatalf("unexpected error %v", err)
		}
		if rep.Accepted < 0 || rep.Accepted > limits.MaxInputBytes || rep.StdoutOffset < 0 || rep.StderrOffset < 0 {
			t.Fatalf("reply out of range: %+v", rep)
		}
	})
}
