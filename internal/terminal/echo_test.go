package terminal_test

import (
	"bytes"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/terminal"
)

// readLine runs `read -r x; echo got:$x` on a new terminal, sends it a line
// through WithoutEcho (after prepare, on the terminal's other end), and
// returns all it printed and the terminal's local modes after.
func readLine(t *testing.T, prepare func(slave *os.File), during func(master *os.File)) (string, uint32) {
	t.Helper()
	master, slave, err := terminal.Open(terminal.Size{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	if prepare != nil {
		prepare(slave)
	}
	cmd := exec.Command("sh", "-c", "read -r x; echo got:$x; sleep 0.2")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	// The shell is waiting in read once it sleeps on the terminal.
	time.Sleep(100 * time.Millisecond)
	err = terminal.WithoutEcho(master, func() error {
		if during != nil {
			during(master)
		}
		_, err := master.Write([]byte("s3cret\n"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var out bytes.Buffer
	master.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	for !bytes.Contains(out.Bytes(), []byte("got:")) || !bytes.Contains(out.Bytes(), []byte("\n")) {
		n, err := master.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return out.String(), tio.Lflag
}

// TestWithoutEchoHidesTheLine: a program that reads a line without turning
// echo off does not see it echoed; echo is on again after.
func TestWithoutEchoHidesTheLine(t *testing.T) {
	for range 10 {
		out, lflag := readLine(t, nil, nil)
		if out != "got:s3cret\r\n" {
			t.Fatalf("the terminal showed %q, want only the program's own line", out)
		}
		if lflag&unix.ECHO == 0 {
			t.Fatal("echo is still off after the write")
		}
	}
}

// TestWithoutEchoLeavesTheProgramsModes: echo off already stays off; a
// mode the program set meanwhile is not undone.
func TestWithoutEchoLeavesTheProgramsModes(t *testing.T) {
	echoOff := func(f *os.File) {
		tio, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		tio.Lflag &^= unix.ECHO
		if err := unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, tio); err != nil {
			t.Fatal(err)
		}
	}
	if out, lflag := readLine(t, echoOff, nil); out != "got:s3cret\r\n" || lflag&unix.ECHO != 0 {
		t.Fatalf("echo off before: %q, echo %v after", out, lflag&unix.ECHO != 0)
	}
	echoNL := func(master *os.File) {
		tio, err := unix.IoctlGetTermios(int(master.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		tio.Lflag |= unix.ECHONL
		if err := unix.IoctlSetTermios(int(master.Fd()), unix.TCSETS, tio); err != nil {
			t.Fatal(err)
		}
	}
	if _, lflag := readLine(t, nil, echoNL); lflag&unix.ECHO != 0 || lflag&unix.ECHONL == 0 {
		t.Fatalf("modes changed during the write were undone: lflag %#x", lflag)
	}
}

// TestWithoutEchoOnAPipe: where there is no terminal, the write is made as
// it is.
func TestWithoutEchoOnAPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := terminal.WithoutEcho(w, func() error { _, err := w.Write([]byte("x\n")); return err }); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, _ := r.Read(buf); string(buf[:n]) != "x\n" {
		t.Fatalf("the pipe got %q", buf[:n])
	}
}
