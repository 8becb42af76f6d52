package jobinput

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/secretmask"
	"github.com/commandcore/commandcore/internal/terminal"
)

// Sink is where a job's input goes: the write end of its stdin pipe, or
// its terminal's master.
type Sink struct {
	W        *os.File
	Terminal bool
	// Offsets reports how much of each output stream has been captured.
	Offsets func() (stdout, stderr int64)
	// Resized follows a terminal's resize; Screen writes the terminal's
	// screen file. Both are nil for a job without an emulated terminal.
	Resized func(terminal.Size)
	Screen  func() error
	// Secrets keeps the secrets written, to mask them in the job's output.
	Secrets *secretmask.Set
}

// Listener is the supervisor's end of the channel.
type Listener struct {
	ln   *net.UnixListener
	path string
	done chan struct{}
	sink Sink
	// closed is set once stdin is closed (eof, or the job closed its end).
	closed bool
	// buf holds one request's data; requests are served one at a time.
	buf []byte
}

// Listen creates the channel's socket in dir, owner-only. It binds through
// /proc/self/fd so a job directory deeper than a socket address allows
// (108 bytes) still works.
func Listen(dir string) (*Listener, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open job directory: %w", err)
	}
	defer d.Close()
	path := filepath.Join(dir, SocketFile)
	addr := &net.UnixAddr{Net: "unix", Name: "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + SocketFile}
	ln, err := net.ListenUnix("unix", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	// The name bound through /proc means nothing once d is closed.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		os.Remove(path)
		return nil, fmt.Errorf("restrict socket: %w", err)
	}
	return &Listener{ln: ln, path: path, done: make(chan struct{})}, nil
}

// Serve answers requests with sink until Close. Connections made before it
// wait in the socket's backlog.
func (l *Listener) Serve(sink Sink) {
	l.sink = sink
	go l.loop()
}

// Close stops serving, waits for the request in progress and removes the
// socket: from then on a sender learns that the job is gone. A stdin pipe
// is closed; a terminal's master stays open for its capture.
func (l *Listener) Close() {
	l.ln.Close()
	if l.sink.W != nil {
		<-l.done
		if !l.sink.Terminal && !l.closed {
			l.sink.W.Close()
		}
	}
	os.Remove(l.path)
}

func (l *Listener) loop() {
	defer close(l.done)
	for {
		c, err := l.ln.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// EMFILE and the like: back off rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		l.serve(c)
	}
}

func (l *Listener) serve(c *net.UnixConn) {
	defer c.Close()
	if !samePeer(c) {
		return
	}
	c.SetDeadline(time.Now().Add(limits.InputExchangeTimeout))
	if l.buf == nil {
		l.buf = make([]byte, limits.MaxInputBytes)
	}
	req, err := readRequest(c, l.buf)
	if err != nil {
		c.Write(encodeReply(statusBad, Reply{}))
		return
	}
	status, rep := l.handle(req)
	c.Write(encodeReply(status, rep))
}

func (l *Listener) handle(req Request) (byte, Reply) {
	if req.Screen {
		if l.sink.Screen == nil {
			return statusNoTTY, Reply{}
		}
		if l.sink.Screen() != nil {
			return statusBad, Reply{}
		}
		return statusOK, Reply{}
	}
	if req.Resize != nil {
		if !l.sink.Terminal {
			return statusNoTTY, Reply{}
		}
		if terminal.SetSize(l.sink.W, *req.Resize) != nil {
			return statusBad, Reply{}
		}
		if l.sink.Resized != nil {
			l.sink.Resized(*req.Resize)
		}
		return statusOK, Reply{}
	}
	var rep Reply
	rep.StdoutOffset, rep.StderrOffset = l.sink.Offsets()
	if l.closed {
		return statusClose, rep
	}
	if req.Secret {
		defer clear(req.Data)
		if status := l.keepSecret(req.Data); status != statusOK {
			return status, rep
		}
	}
	var n int
	var err error
	write := func() error {
		n, err = l.write(req.Data)
		return err
	}
	if req.Secret && l.sink.Terminal {
		terminal.WithoutEcho(l.sink.W, write)
	} else {
		write()
	}
	rep.Accepted = n
	switch {
	case errors.Is(err, syscall.EPIPE):
		// The job closed its end of stdin; nothing will ever read more.
		l.closed = true
		return statusClose, rep
	case err != nil:
		// Not taken within InputWriteTimeout: the reply says how much was,
		// and stdin stays open, so no byte is lost behind an early close.
		return statusOK, rep
	}
	if req.EOF {
		l.closed = true
		if l.sink.Terminal {
			if c, err := terminal.EOFByte(l.sink.W); err == nil {
				l.write([]byte{c})
			}
		} else {
			l.sink.W.Close()
		}
	}
	return statusOK, rep
}

// keepSecret adds the secret a line of secret input carries to the ones
// the job's output is masked for, before any of it reaches the job.
func (l *Listener) keepSecret(data []byte) byte {
	secret, err := secretmask.Line(data)
	if err != nil || l.sink.Secrets == nil {
		return statusBad
	}
	if len(secret) == 0 {
		return statusOK
	}
	switch err := l.sink.Secrets.Add(secret); {
	case errors.Is(err, secretmask.ErrFull):
		return statusFull
	case err != nil:
		return statusBad
	}
	return statusOK
}

func (l *Listener) write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	l.sink.W.SetWriteDeadline(time.Now().Add(limits.InputWriteTimeout))
	return l.sink.W.Write(p)
}

// samePeer reports whether the process at the other end of c runs as our
// user. The job directory is already owner-only; this holds if it is not.
func samePeer(c *net.UnixConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return false
	}
	return int(cred.Uid) == os.Getuid()
}
