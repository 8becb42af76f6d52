// Package terminal opens the pseudo-terminal a pty job runs on and sets its
// window size. It uses golang.org/x/sys/unix directly: opening a pty is
// three ioctls, and the module is already a dependency, where
// github.com/creack/pty would add one for the same calls.
package terminal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/limits"
)

// Size is a terminal's window size in character cells.
type Size struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// Valid reports whether both dimensions are between 1 and limits.TerminalDimensionMax.
func (s Size) Valid() bool {
	return s.Cols >= 1 && s.Cols <= limits.TerminalDimensionMax && s.Rows >= 1 && s.Rows <= limits.TerminalDimensionMax
}

// Open opens a new pseudo-terminal of the given size. The master is
// non-blocking, so reads and writes on it honour deadlines and Close; the
// slave is the job's stdin, stdout and stderr and its controlling terminal.
func Open(size Size) (master, slave *os.File, err error) {
	if !size.Valid() {
		return nil, nil, fmt.Errorf("terminal size %dx%d out of range", size.Cols, size.Rows)
	}
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	master = os.NewFile(uintptr(mfd), "/dev/ptmx")
	fail := func(what string, err error) (*os.File, *os.File, error) {
		master.Close()
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return fail("unlock pty", err)
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		return fail("pty number", err)
	}
	name := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("open pty slave", err)
	}
	slave = os.NewFile(uintptr(sfd), name)
	if err := SetSize(master, size); err != nil {
		slave.Close()
		return fail("set size", err)
	}
	return master, slave, nil
}

// SetSize sets the terminal's window size; the kernel sends SIGWINCH to
// its foreground process group.
func SetSize(master *os.File, size Size) error {
	if !size.Valid() {
		return fmt.Errorf("terminal size %dx%d out of range", size.Cols, size.Rows)
	}
	ws := &unix.Winsize{Col: uint16(size.Cols), Row: uint16(size.Rows)}
	return control(master, func(fd int) error { return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, ws) })
}

// EOFByte returns the character that ends input on the terminal (VEOF,
// usually ^D).
func EOFByte(master *os.File) (byte, error) {
	var c byte
	err := control(master, func(fd int) error {
		t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			return err
		}
		c = t.Cc[unix.VEOF]
		return nil
	})
	return c, err
}

// control runs fn on f's descriptor through SyscallConn: File.Fd would
// switch it to blocking mode, and a blocked read could then not be ended
// by Close.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// Reader wraps a master for reading: once every slave descriptor is closed
// Linux answers reads with EIO, which for the job's output is its end.
type Reader struct{ Master *os.File }

func (r Reader) Read(p []byte) (int, error) {
	n, err := r.Master.Read(p)
	if errors.Is(err, unix.EIO) {
		return n, io.EOF
	}
	return n, err
}

// WithoutEcho calls write with the terminal's echo turned off, so what it
// writes is not shown back (a program reading a password turns it off
// itself; one that does not would print the input). Echo is turned back on
// once the line discipline has taken what write wrote, unless the program
// changed the terminal's modes meanwhile. With echo off already, or when
// the modes cannot be read or set, write is called as it is.
func WithoutEcho(master *os.File, write func() error) error {
	var on *unix.Termios
	err := control(master, func(fd int) (err error) {
		on, err = unix.IoctlGetTermios(fd, unix.TCGETS)
		return err
	})
	if err != nil || on.Lflag&unix.ECHO == 0 {
		return write()
	}
	off := *on
	off.Lflag &^= unix.ECHO
	if control(master, func(fd int) error { return unix.IoctlSetTermios(fd, unix.TCSETS, &off) }) != nil {
		return write()
	}
	werr := write()
	control(master, func(fd int) error {
		settle(fd)
		now, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil || *now != off {
			return err
		}
		return unix.IoctlSetTermios(fd, unix.TCSETS, on)
	})
	return werr
}

// settle waits until the line discipline has taken the input written to
// master fd: the kernel hands a pty's input to it from a work queue, and
// decides then whether to echo. Polling the terminal's other end waits for
// that work when no line is waiting to be read there (a program blocked
// reading its input: the case that matters).
func settle(fd int) {
	peer, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, uintptr(unix.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		return
	}
	unix.Poll([]unix.PollFd{{Fd: int32(peer), Events: unix.POLLIN}}, 0)
	unix.Close(int(peer))
}
