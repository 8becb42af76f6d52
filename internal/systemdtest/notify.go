package systemdtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// NotifyTakeover is the user manager's notify socket path taken over by
// another socket, as a second `systemd --user` booted on the same runtime
// directory takes it: from then on READY=1 from the manager's Type=notify
// units reaches the new socket, not their manager, and their start jobs
// never complete.
type NotifyTakeover struct {
	path, aside string
	conn        *net.UnixConn
	astray      atomic.Int32
}

// TakeOverNotifySocket moves the manager's notify socket aside and binds
// one of its own in its place. The caller must hold Exclusive: every unit
// started meanwhile, by any test, loses its READY. Release undoes it.
func (m *Manager) TakeOverNotifySocket() (*NotifyTakeover, error) {
	n := &NotifyTakeover{path: filepath.Join(m.runtimeDir, "systemd", "notify")}
	n.aside = n.path + ".taken-over"
	if err := os.Rename(n.path, n.aside); err != nil {
		return nil, fmt.Errorf("systemdtest: %w", err)
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		os.Rename(n.aside, n.path)
		return nil, fmt.Errorf("systemdtest: %w", err)
	}
	n.conn = conn
	// Units may run as any user the manager serves, as its socket allows.
	os.Chmod(n.path, 0o777)
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
			n.astray.Add(1)
		}
	}()
	return n, nil
}

// Astray reports how many notifications reached the taken-over socket.
func (n *NotifyTakeover) Astray() int { return int(n.astray.Load()) }

// Release gives the path back to the manager's socket. It is safe to call
// more than once, and after the manager was killed (a new one binds its
// own socket at the path when it boots).
func (n *NotifyTakeover) Release() error {
	if n.conn == nil {
		return nil
	}
	n.conn.Close()
	n.conn = nil
	if err := os.Remove(n.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("systemdtest: %w", err)
	}
	if err := os.Rename(n.aside, n.path); err != nil {
		return fmt.Errorf("systemdtest: %w", err)
	}
	return nil
}

// NotifyRedirectFile is the file that, in a directory a test binary's
// supervise role is told to look in (RedirectNotify), names the socket
// its READY is to go to instead of its manager's.
const NotifyRedirectFile = "test-notify-socket"

// AstrayNotify is a notify socket of the test's own: a unit whose main
// process sends READY=1 there (RedirectNotify) is never READY for its
// manager, and its start job never completes, as when the manager's
// socket is taken over, but for that unit alone: other units, of any
// test, keep theirs, so no Exclusive hold is needed.
type AstrayNotify struct {
	path   string
	conn   *net.UnixConn
	astray atomic.Int32
}

// NewAstrayNotify binds an AstrayNotify in a new directory; it is closed
// when the test ends.
func NewAstrayNotify(tb testing.TB) *AstrayNotify {
	tb.Helper()
	a := &AstrayNotify{path: filepath.Join(tb.TempDir(), "notify")}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: a.path, Net: "unixgram"})
	if err != nil {
		tb.Fatalf("systemdtest: %v", err)
	}
	a.conn = conn
	os.Chmod(a.path, 0o777)
	tb.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
			a.astray.Add(1)
		}
	}()
	return a
}

// Astray reports how many notifications reached the socket.
func (a *AstrayNotify) Astray() int { return int(a.astray.Load()) }

// RedirectTo writes dir's NotifyRedirectFile naming the socket, so that a
// supervise role that looks in dir sends its notifications here.
func (a *AstrayNotify) RedirectTo(tb testing.TB, dir string) {
	tb.Helper()
	if err := os.WriteFile(filepath.Join(dir, NotifyRedirectFile), []byte(a.path), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// RedirectNotify is for a test binary's supervise role: when dir holds a
// NotifyRedirectFile, NOTIFY_SOCKET becomes the socket it names.
func RedirectNotify(dir string) {
	if path, err := os.ReadFile(filepath.Join(dir, NotifyRedirectFile)); err == nil {
		os.Setenv("NOTIFY_SOCKET", string(path))
	}
}
