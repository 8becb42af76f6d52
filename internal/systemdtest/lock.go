package systemdtest

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// usersLockPath is held shared by every test process using the manager (see
// Main) and exclusively by tests that kill or stop it (see Exclusive).
const usersLockPath = "/run/commandcore-test-usermgr.users.lock"

// lockFile takes a flock of kind how on path, blocking, and returns the
// release function. The descriptor is close-on-exec, so a manager booted
// while the lock is held does not inherit (and keep) it.
func lockFile(path string, how int) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("systemdtest: %w", err)
	}
	if err := flock(f, how); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			if err != nil {
				return fmt.Errorf("systemdtest: flock %s: %w", f.Name(), err)
			}
			return nil
		}
	}
}

// users is this process's hold on usersLockPath.
var users struct {
	sync.Mutex
	f         *os.File // the lock file: shared hold taken by Main, if any
	ownFile   bool     // f was opened just for an exclusive hold
	exclusive int      // nesting depth of exclusive holds
}

// Main is for a package's TestMain: it makes sure a user manager is ready,
// failing the package if not (systemd tests must run here, never skip), and
// runs the tests. It does not tear the manager down: other test processes
// share it.
//
//	func TestMain(m *testing.M) { systemdtest.Main(m) }
func Main(m *testing.M) {
	if err := holdShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := Ensure(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// holdShared takes the shared users lock for the life of the process, so a
// test in another package that kills the manager waits for this one to
// finish.
func holdShared() error {
	users.Lock()
	defer users.Unlock()
	if users.f != nil {
		return nil
	}
	f, err := os.OpenFile(usersLockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("systemdtest: %w", err)
	}
	if err := flock(f, unix.LOCK_SH); err != nil {
		f.Close()
		return err
	}
	users.f = f
	return nil
}

// Exclusive is for tests that kill, stop or reboot the shared manager. It
// waits until no other test process (one that went through Main) is running
// tests, and keeps them from starting until the test ends. At the end it
// makes sure a ready manager is left behind for them.
func Exclusive(tb testing.TB) {
	tb.Helper()
	if err := acquireExclusive(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		// Other processes must find a ready manager once we let them go.
		if _, err := Ensure(); err != nil {
			tb.Errorf("leaving a ready user manager behind: %v", err)
		}
		if err := releaseExclusive(); err != nil {
			tb.Error(err)
		}
	})
}

// WithExclusive runs fn holding the users lock exclusively (e.g. for
// teardown): it waits until no other test process is using the manager.
func WithExclusive(fn func() error) error {
	if err := acquireExclusive(); err != nil {
		return err
	}
	err := fn()
	if rerr := releaseExclusive(); err == nil {
		err = rerr
	}
	return err
}

// acquireExclusive takes the users lock exclusively. A process holding it
// shared (via Main) converts its own hold: a second descriptor would wait for
// that shared hold forever. Nested and concurrent callers share one hold.
func acquireExclusive() error {
	users.Lock()
	defer users.Unlock()
	if users.exclusive == 0 {
		if users.f == nil {
			f, err := os.OpenFile(usersLockPath, os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				return fmt.Errorf("systemdtest: %w", err)
			}
			users.f, users.ownFile = f, true
		}
		// Converting drops the shared hold first, so two processes
		// upgrading at once cannot deadlock.
		if err := flock(users.f, unix.LOCK_EX); err != nil {
			return err
		}
	}
	users.exclusive++
	return nil
}

func releaseExclusive() error {
	users.Lock()
	defer users.Unlock()
	users.exclusive--
	if users.exclusive > 0 {
		return nil
	}
	if users.ownFile {
		users.ownFile = false
		f := users.f
		users.f = nil
		return f.Close()
	}
	return flock(users.f, unix.LOCK_SH)
}
