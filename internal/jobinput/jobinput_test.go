package jobinput

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/secretmask"
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
	for _, r := range []Request{{Data: []byte("hello\n")}, {EOF: true}, {Resize: &terminal.Size{Cols: 80, Rows: 24}}, {Screen: true}} {
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
	for status := range answers {
		f.Add(encodeReply(status, Reply{}))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := readReply(bytes.NewReader(b))
		if err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrGone) && !isAnswer(err) {
			t.Fatalf("unexpected error %v", err)
		}
		if rep.Accepted < 0 || rep.Accepted > limits.MaxInputBytes || rep.StdoutOffset < 0 || rep.StderrOffset < 0 {
			t.Fatalf("reply out of range: %+v", rep)
		}
	})
}

// TestASupervisorThatDiedIsGone: a supervisor killed before it could
// remove its socket leaves the file behind, and nothing listens on it.
func TestASupervisorThatDiedIsGone(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Net: "unix", Name: filepath.Join(dir, SocketFile)})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(filepath.Join(dir, SocketFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Send(dir, Request{Data: []byte("x")}); !errors.Is(err, ErrGone) {
		t.Fatalf("stale socket: %v, want ErrGone", err)
	}
}

func TestAFullSizeWriteIsTaken(t *testing.T) {
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	serve(t, dir, Sink{W: w, Offsets: offsets(0, 0)})
	got := make(chan int, 1)
	go func() { b, _ := io.ReadAll(r); got <- len(b) }()
	rep, err := Send(dir, Request{Data: make([]byte, limits.MaxInputBytes), EOF: true})
	if err != nil || rep.Accepted != limits.MaxInputBytes {
		t.Fatalf("64 KiB: %+v, %v; want all accepted", rep, err)
	}
	if n := <-got; n != limits.MaxInputBytes {
		t.Fatalf("stdin got %d bytes", n)
	}
}

// TestARequestIsReadIntoTheGivenBuffer: the supervisor's one buffer holds
// every request's data, a full-size one too.
func TestARequestIsReadIntoTheGivenBuffer(t *testing.T) {
	frame, err := encodeRequest(Request{Data: bytes.Repeat([]byte("x"), limits.MaxInputBytes)})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, limits.MaxInputBytes)
	req, err := readRequest(bytes.NewReader(frame), buf)
	if err != nil || len(req.Data) != limits.MaxInputBytes {
		t.Fatalf("%d bytes, %v", len(req.Data), err)
	}
	if &req.Data[0] != &buf[0] {
		t.Fatal("the data is not in the given buffer")
	}
}

// TestScreenAndResizeReachTheirHooks: a screen request runs the sink's
// Screen, whose failure is a refusal; a resize reaches Resized after the
// terminal's size is set; a sink without them answers not a terminal.
func TestScreenAndResizeReachTheirHooks(t *testing.T) {
	dir := t.TempDir()
	master, slave, err := terminal.Open(terminal.Size{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer slave.Close()
	var screens int
	var fail error
	var resized []terminal.Size
	serve(t, dir, Sink{W: master, Terminal: true, Offsets: offsets(0, 0),
		Screen:  func() error { screens++; return fail },
		Resized: func(s terminal.Size) { resized = append(resized, s) }})
	if _, err := Send(dir, Request{Screen: true}); err != nil || screens != 1 {
		t.Fatalf("screen: %v, %d calls", err, screens)
	}
	fail = errors.New("disk full")
	if _, err := Send(dir, Request{Screen: true}); !errors.Is(err, ErrRefused) || screens != 2 {
		t.Fatalf("a failed screen: %v, %d calls; want ErrRefused", err, screens)
	}
	if _, err := Send(dir, Request{Resize: &terminal.Size{Cols: 90, Rows: 20}}); err != nil || len(resized) != 1 || resized[0] != (terminal.Size{Cols: 90, Rows: 20}) {
		t.Fatalf("resize: %v, hook saw %v", err, resized)
	}
	plain := t.TempDir()
	r, w, _ := os.Pipe()
	defer r.Close()
	serve(t, plain, Sink{W: w, Offsets: offsets(0, 0)})
	if _, err := Send(plain, Request{Screen: true}); !errors.Is(err, ErrNotTerminal) {
		t.Fatalf("screen of a stdin job: %v, want ErrNotTerminal", err)
	}
	for name, req := range map[string]Request{
		"with data":   {Screen: true, Data: []byte("x")},
		"with eof":    {Screen: true, EOF: true},
		"with resize": {Screen: true, Resize: &terminal.Size{Cols: 1, Rows: 1}},
	} {
		if _, err := encodeRequest(req); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	frame, _ := encodeRequest(Request{Screen: true})
	for i, b := range map[int]byte{4: 1, 8: 1} {
		bad := append([]byte(nil), frame...)
		bad[i] = b
		if _, err := readRequest(bytes.NewReader(bad), nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("screen frame with byte %d set: %v, want ErrMalformed", i, err)
		}
	}
}

func TestAResizeIsValidatedBeforeSending(t *testing.T) {
	for name, r := range map[string]Request{
		"no size":       {Resize: &terminal.Size{}},
		"too wide":      {Resize: &terminal.Size{Cols: limits.TerminalDimensionMax + 1, Rows: 24}},
		"with data":     {Resize: &terminal.Size{Cols: 80, Rows: 24}, Data: []byte("x")},
		"with eof":      {Resize: &terminal.Size{Cols: 80, Rows: 24}, EOF: true},
		"data and eof":  {Resize: &terminal.Size{Cols: 80, Rows: 24}, Data: []byte("x"), EOF: true},
		"invalid, eof":  {Resize: &terminal.Size{}, EOF: true},
		"invalid, data": {Resize: &terminal.Size{}, Data: []byte("x")},
	} {
		if _, err := Send(t.TempDir(), r); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// TestReadRequestRefusesEveryStrayByte: each header byte that is not the
// format's, alone, makes the frame malformed.
func TestReadRequestRefusesEveryStrayByte(t *testing.T) {
	write, _ := encodeRequest(Request{Data: []byte("hi")})
	resize, _ := encodeRequest(Request{Resize: &terminal.Size{Cols: 80, Rows: 24}})
	for _, frame := range [][]byte{write, resize} {
		if _, err := readRequest(bytes.NewReader(frame), nil); err != nil {
			t.Fatalf("%x: %v", frame, err)
		}
	}
	for _, c := range []struct {
		frame []byte
		at    int
		to    byte
	}{
		{write, 0, 'X'}, {write, 1, 'X'}, {write, 2, version + 1},
		{write, 4, 4}, {write, 5, 1}, {write, 6, 1}, {write, 7, 1},
		{resize, 4, flagEOF}, {resize, 8, 0}, {resize, 5, 1},
	} {
		f := bytes.Clone(c.frame)
		f[c.at] = c.to
		if _, err := readRequest(bytes.NewReader(f), nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("byte %d of %x set to %d: %v, want ErrMalformed", c.at, c.frame, c.to, err)
		}
	}
	over := bytes.Clone(write[:requestLen])
	binary.LittleEndian.PutUint32(over[8:], limits.MaxInputBytes+1)
	if _, err := readRequest(io.MultiReader(bytes.NewReader(over), bytes.NewReader(make([]byte, limits.MaxInputBytes+1))), nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("a frame of 64 KiB + 1: %v, want ErrMalformed", err)
	}
}

func TestReadReplyRefusesWhatIsOutOfRange(t *testing.T) {
	full := encodeReply(statusOK, Reply{Accepted: limits.MaxInputBytes, StdoutOffset: 1, StderrOffset: 2})
	if rep, err := readReply(bytes.NewReader(full)); err != nil || rep != (Reply{limits.MaxInputBytes, 1, 2}) {
		t.Fatalf("all of 64 KiB accepted: %+v, %v", rep, err)
	}
	bad := map[string][]byte{
		"over 64 KiB":      encodeReply(statusOK, Reply{Accepted: limits.MaxInputBytes + 1}),
		"negative stdout":  encodeReply(statusOK, Reply{StdoutOffset: -1}),
		"negative stderr":  encodeReply(statusOK, Reply{StderrOffset: -1}),
		"an unknown state": encodeReply(statusFull+1, Reply{}),
	}
	for i := 1; i < 4; i++ {
		b := encodeReply(statusOK, Reply{})
		b[i] = 1
		bad[fmt.Sprintf("padding byte %d", i)] = b
	}
	for name, b := range bad {
		if _, err := readReply(bytes.NewReader(b)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// TestCloseEndsAStdinPipeButNotATerminal: once the supervisor stops
// serving, a job reading a pipe sees end-of-file; a terminal's master
// stays open for the capture of what the job still prints.
func TestCloseEndsAStdinPipeButNotATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l := serve(t, t.TempDir(), Sink{W: w, Offsets: offsets(0, 0)})
	l.Close()
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := r.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("stdin after Close: %d, %v; want end-of-file", n, err)
	}

	master, slave, err := terminal.Open(terminal.Size{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer slave.Close()
	l = serve(t, t.TempDir(), Sink{W: master, Terminal: true, Offsets: offsets(0, 0)})
	l.Close()
	if _, err := slave.Write([]byte("bye\n")); err != nil {
		t.Fatal(err)
	}
	master.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := master.Read(make([]byte, 64)); n == 0 || err != nil {
		t.Fatalf("master after Close: %d, %v; want the job's output", n, err)
	}
}

// TestAReplyCutShort: no reply at all is a supervisor that ended while
// the request waited; part of one is a broken frame.
func TestAReplyCutShort(t *testing.T) {
	if _, err := readReply(bytes.NewReader(nil)); !errors.Is(err, ErrGone) {
		t.Errorf("no reply: %v, want ErrGone", err)
	}
	if _, err := readReply(bytes.NewReader(encodeReply(statusOK, Reply{})[:replyLen-1])); !errors.Is(err, ErrMalformed) {
		t.Errorf("a short reply: %v, want ErrMalformed", err)
	}
}

// TestServingOutlastsNoFreeDescriptor: a supervisor out of descriptors
// when a request arrives serves it once one is free again.
func TestServingOutlastsNoFreeDescriptor(t *testing.T) {
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	// Connected before Serve, the request waits in the backlog.
	c, err := dial(dir, time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	frame, _ := encodeRequest(Request{Data: []byte("x")})
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// The lowest free descriptor becomes the limit: no new one opens.
	free, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(free)
	low := lim
	low.Cur = uint64(free)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	l.Serve(Sink{W: w, Offsets: offsets(0, 0)})
	time.Sleep(200 * time.Millisecond)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if rep, err := readReply(c); err != nil || rep.Accepted != 1 {
		t.Fatalf("reply %+v, %v; want the byte taken", rep, err)
	}
}

// TestSecretInputIsKeptBeforeItIsWritten: a line of secret input reaches
// the job and is masked in what is read after; input that is not one line
// is refused and reaches nothing; past the most secrets a job keeps, a new
// one is refused and not written, one kept already is written.
func TestSecretInputIsKeptBeforeItIsWritten(t *testing.T) {
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	secrets := &secretmask.Set{}
	serve(t, dir, Sink{W: w, Offsets: offsets(0, 0), Secrets: secrets})
	masked := func(s string) string {
		b, _ := io.ReadAll(secrets.Reader(strings.NewReader(s)))
		return string(b)
	}
	if rep, err := Send(dir, Request{Data: []byte("hunter2\n"), Secret: true}); err != nil || rep.Accepted != 8 {
		t.Fatalf("a secret line: %+v, %v", rep, err)
	}
	if got := masked("pw hunter2"); got != "pw ***" {
		t.Fatalf("after the secret: %q", got)
	}
	for _, bad := range []string{"two\nlines\n", "no newline", "tab\tin\n", "del\x7f\n", "cr\r\n", ""} {
		if _, err := Send(dir, Request{Data: []byte(bad), Secret: true}); !errors.Is(err, ErrRefused) {
			t.Errorf("secret input %q: %v, want ErrRefused", bad, err)
		}
	}
	if _, err := Send(dir, Request{Data: []byte("\n"), Secret: true}); err != nil {
		t.Fatalf("an empty secret line: %v", err)
	}
	for i := 1; i < limits.SecretsPerJob; i++ {
		if _, err := Send(dir, Request{Data: []byte(fmt.Sprintf("s%d\n", i)), Secret: true}); err != nil {
			t.Fatalf("secret %d: %v", i+1, err)
		}
	}
	if rep, err := Send(dir, Request{Data: []byte("one more\n"), Secret: true}); !errors.Is(err, ErrSecretsFull) || rep.Accepted != 0 {
		t.Fatalf("a secret past the most kept: %+v, %v; want ErrSecretsFull", rep, err)
	}
	if _, err := Send(dir, Request{Data: []byte("s1\n"), Secret: true}); err != nil {
		t.Fatalf("a secret kept already: %v", err)
	}
	if _, err := Send(dir, Request{EOF: true}); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	want := "hunter2\n\n"
	for i := 1; i < limits.SecretsPerJob; i++ {
		want += fmt.Sprintf("s%d\n", i)
	}
	if string(got) != want+"s1\n" {
		t.Fatalf("the job read %q", got)
	}
	// Only a write is secret.
	for _, req := range []Request{{Screen: true, Secret: true}, {Resize: &terminal.Size{Cols: 1, Rows: 1}, Secret: true}} {
		if _, err := encodeRequest(req); !errors.Is(err, ErrMalformed) {
			t.Errorf("%+v: %v, want ErrMalformed", req, err)
		}
	}
}

// TestASecretNeedsASupervisorThatMasks: a supervisor with nowhere to keep
// secrets refuses secret input rather than pass it on unmasked.
func TestASecretNeedsASupervisorThatMasks(t *testing.T) {
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	serve(t, dir, Sink{W: w, Offsets: offsets(0, 0)})
	if _, err := Send(dir, Request{Data: []byte("hunter2\n"), Secret: true}); !errors.Is(err, ErrRefused) {
		t.Fatalf("%v, want ErrRefused", err)
	}
}

func isAnswer(err error) bool {
	for _, a := range []error{ErrClosed, ErrNotTerminal, ErrRefused, ErrSecretsFull} {
		if err == a {
			return true
		}
	}
	return false
}

// TestEveryStatusIsAnAnswer pins the wire's status bytes to the errors a
// client reads, so a new status cannot go unread or unfuzzed.
func TestEveryStatusIsAnAnswer(t *testing.T) {
	want := map[byte]error{1: ErrClosed, 2: ErrNotTerminal, 3: ErrRefused, 4: ErrSecretsFull}
	for status, err := range want {
		if _, got := readReply(bytes.NewReader(encodeReply(status, Reply{}))); got != err {
			t.Errorf("status %d reads %v, want %v", status, got, err)
		}
	}
	if _, got := readReply(bytes.NewReader(encodeReply(5, Reply{}))); !errors.Is(got, ErrMalformed) {
		t.Errorf("status 5 reads %v, want ErrMalformed", got)
	}
	if len(answers) != len(want) {
		t.Errorf("%d answers, want %d", len(answers), len(want))
	}
}
