package terminal_test

import (
	"io"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/terminal"
)

func TestOpenSetsTheRequestedSize(t *testing.T) {
	master, slave, err := terminal.Open(terminal.Size{Cols: 132, Rows: 43})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer slave.Close()
	ws, err := unix.IoctlGetWinsize(int(slave.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		t.Fatal(err)
	}
	if ws.Col != 132 || ws.Row != 43 {
		t.Fatalf("size %dx%d, want 132x43", ws.Col, ws.Row)
	}
	if err := terminal.SetSize(master, terminal.Size{Cols: 80, Rows: 24}); err != nil {
		t.Fatal(err)
	}
	if ws, _ = unix.IoctlGetWinsize(int(slave.Fd()), unix.TIOCGWINSZ); ws.Col != 80 || ws.Row != 24 {
		t.Fatalf("after resize %dx%d, want 80x24", ws.Col, ws.Row)
	}
	if c, err := terminal.EOFByte(master); err != nil || c != 4 {
		t.Fatalf("EOF character %q (%v), want ^D", c, err)
	}
}

func TestSizeBounds(t *testing.T) {
	for _, s := range []terminal.Size{{0, 24}, {80, 0}, {1001, 24}, {80, 1001}, {-1, 5}} {
		if _, _, err := terminal.Open(s); err == nil {
			t.Errorf("Open(%v) accepted", s)
		}
	}
	for _, s := range []terminal.Size{{1, 1}, {1000, 1000}} {
		if !s.Valid() {
			t.Errorf("%v refused", s)
		}
	}
}

// The master's reader ends with EOF, not EIO, once the last slave
// descriptor is gone, and keeps what was written before.
func TestReaderEndsAtHangup(t *testing.T) {
	master, slave, err := terminal.Open(terminal.Size{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	if _, err := slave.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	done := make(chan []byte, 1)
	go func() {
		b, err := io.ReadAll(terminal.Reader{Master: master})
		if err != nil {
			t.Errorf("read: %v", err)
		}
		done <- b
	}()
	select {
	case b := <-done:
		if string(b) != "hi\r\n" {
			t.Fatalf("read %q, want %q", b, "hi\r\n")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reader did not end at hangup")
	}
}
