package systemdtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
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
