package launcher

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/procid"
)

// LossReason says why the launcher abandoned its connection to a user
// manager. The words are stable: the activity journal records them.
type LossReason string

// The closed set of loss reasons.
const (
	// LostManager: the manager the connection led to is gone (no process
	// has its recorded PID and start ticks any more).
	LostManager LossReason = "user_manager_gone"
	// LostBus: the bus connection closed.
	LostBus LossReason = "bus_closed"
	// LostSocket: the bus socket now belongs to another bus (another
	// manager took it over while the old one lives on).
	LostSocket LossReason = "bus_replaced"
)

// ManagerChange is a change in the user manager the launcher talks to.
type ManagerChange struct {
	// Lost says why the previous connection was abandoned; empty when
	// there was none (the first connection, or none was reachable).
	Lost LossReason
	// Reachable reports whether a user manager answers now.
	Reachable bool
}

// busConnectTimeout bounds connecting to the user bus. The handshake has no
// deadline of its own, and a bus that accepts but never answers would
// otherwise hold every caller of Bus (launches and status alike) forever.
const busConnectTimeout = 5 * time.Second

func (l *Launcher) connectTimeout() time.Duration {
	if l.ConnectTimeout > 0 {
		return l.ConnectTimeout
	}
	return busConnectTimeout
}

// errBusTimeout reports a bus that did not complete its handshake in time.
var errBusTimeout = errors.New("the user bus did not answer in time")

// userBus is one connection to a user manager and whom it leads to.
type userBus struct {
	conn *sdbus.Conn
	// manager is the manager's identity; zero when Procs is not set.
	manager procid.Identity
	// socket is the bus socket's identity when connected; zero when the
	// address is not a socket path.
	socket fileID
	// readyAstray reports that a launch on this manager missed its
	// unit's READY (Started.MissedReady) and none has arrived since.
	readyAstray atomic.Bool
}

// fileID identifies a file (a bus socket) across renames and rebinds.
type fileID struct{ dev, ino uint64 }

// Bus returns a connection to the current user manager, or an error when
// none is reachable. A connection whose manager is gone, whose bus closed
// or whose socket another bus took over is abandoned and replaced, so a
// launch never goes to a manager that no longer owns the user's session.
func (l *Launcher) Bus(ctx context.Context) (*sdbus.Conn, error) {
	b, err := l.userBus(ctx)
	if err != nil {
		return nil, err
	}
	return b.conn, nil
}

// userBus is Bus with whom the connection leads to.
func (l *Launcher) userBus(_ context.Context) (*userBus, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lost LossReason
	if l.bus != nil {
		if lost = l.stale(); lost == "" {
			return l.bus, nil
		}
		l.bus.conn.Close()
		l.bus = nil
	}
	b, err := l.connect()
	l.report(ManagerChange{Lost: lost, Reachable: err == nil})
	if err != nil {
		return nil, err
	}
	l.bus = b
	return b, nil
}

// stale says why the cached connection no longer leads to the user's
// current manager, or "" when it does.
func (l *Launcher) stale() LossReason {
	// The manager first: its bus usually goes with it.
	if l.Procs != nil && l.bus.manager.PID > 0 {
		if alive, err := l.Procs.Alive(l.bus.manager); err == nil && !alive {
			return LostManager
		}
	}
	if !l.bus.conn.Connected() {
		return LostBus
	}
	if l.bus.socket != (fileID{}) && socketID(busSocketPath()) != l.bus.socket {
		return LostSocket
	}
	return ""
}

// report tells OnManagerChange of an abandoned connection or a change in
// reachability. It runs under l.mu, so reports arrive in order.
func (l *Launcher) report(c ManagerChange) {
	if c.Lost == "" && l.reachable != nil && *l.reachable == c.Reachable {
		return
	}
	l.reachable = &c.Reachable
	if l.OnManagerChange != nil {
		l.OnManagerChange(c)
	}
}

func (l *Launcher) connect() (*userBus, error) {
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" && os.Getenv("XDG_RUNTIME_DIR") == "" {
		return nil, errors.New("no user bus address in the environment")
	}
	b, err := connectBounded(l.dial, l.connectTimeout())
	if err != nil {
		return nil, fmt.Errorf("connect to the user bus: %w", err)
	}
	b.socket = socketID(busSocketPath())
	return b, nil
}

// dial connects to the user bus and finds the manager on it: a bus
// without one (a dbus-daemon its manager left behind) cannot start units.
func (l *Launcher) dial() (*userBus, error) {
	var first *dbus.Conn
	// go-systemd ties the connection's lifetime to the context it was made
	// with, so the cached connection must not use a request's.
	c, err := sdbus.NewConnection(func() (*dbus.Conn, error) {
		conn, err := dbus.SessionBusPrivate(dbus.WithContext(context.Background()))
		if err != nil {
			return nil, err
		}
		// EXTERNAL with the numeric uid, as go-systemd does: no user
		// name lookup.
		if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			conn.Close()
			return nil, err
		}
		if err := conn.Hello(); err != nil {
			conn.Close()
			return nil, err
		}
		if first == nil {
			first = conn
		}
		return conn, nil
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.connectTimeout())
	defer cancel()
	var pid uint32
	if err := first.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixProcessID", 0,
		"org.freedesktop.systemd1").Store(&pid); err != nil {
		c.Close()
		return nil, fmt.Errorf("no user manager on the bus: %w", err)
	}
	b := &userBus{conn: c}
	if l.Procs != nil {
		// A manager that cannot be identified is still used; only its
		// replacement by socket or a closed bus is then noticed.
		b.manager, _, _ = l.Procs.Lookup(int(pid))
	}
	return b, nil
}

// connectBounded runs connect, giving up after d; a connection that
// completes later is closed.
func connectBounded(connect func() (*userBus, error), d time.Duration) (*userBus, error) {
	type result struct {
		b   *userBus
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := connect()
		done <- result{b, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-done:
		return r.b, r.err
	case <-t.C:
		go func() {
			if r := <-done; r.b != nil {
				r.b.conn.Close()
			}
		}()
		return nil, errBusTimeout
	}
}

// busSocketPath returns the path of the user bus socket the environment
// names, as godbus finds it, or "" when it names none (an abstract socket,
// another transport).
func busSocketPath() string {
	addr := os.Getenv("DBUS_SESSION_BUS_ADDRESS")
	if addr == "" || addr == "autolaunch:" {
		if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
			return filepath.Join(dir, "bus")
		}
		return ""
	}
	if paths := busAddressPaths(addr); len(paths) > 0 {
		return paths[0]
	}
	return ""
}

// busAddressPaths returns, for each address of a D-Bus address list, the
// socket path it names, or "" for one that names none; empty entries
// (a trailing ';') are no address.
func busAddressPaths(addr string) []string {
	var paths []string
	for _, a := range strings.Split(addr, ";") {
		if a != "" {
			paths = append(paths, unixPath(a))
		}
	}
	return paths
}

// unixPath is the socket path of one D-Bus address, "" when it is not a
// unix:path= address.
func unixPath(addr string) string {
	rest, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return ""
	}
	for _, kv := range strings.Split(rest, ",") {
		if v, ok := strings.CutPrefix(kv, "path="); ok {
			// Address values are percent-escaped.
			p, err := url.PathUnescape(v)
			if err != nil {
				return ""
			}
			return p
		}
	}
	return ""
}

// socketID returns the identity of the file at path, zero when there is
// none.
func socketID(path string) fileID {
	var st unix.Stat_t
	if path == "" || unix.Stat(path, &st) != nil {
		return fileID{}
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}
}
