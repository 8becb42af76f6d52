// Package niceness reads and lowers the calling thread's scheduling
// niceness. Linux keeps niceness per thread, and a new thread or child
// process inherits its creator's.
package niceness

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Current returns the calling thread's niceness.
func Current() (int, error) {
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return 0, fmt.Errorf("getpriority: %w", err)
	}
	// The system call answers 20 - nice; libc's wrapper would undo that.
	return 20 - raw, nil
}

// Lower gives the calling thread niceness n unless it runs at n or nicer
// already: without privilege a thread may lower its priority, never raise
// it again.
func Lower(n int) error {
	cur, err := Current()
	if err != nil || cur >= n {
		return err
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, 0, n); err != nil {
		return fmt.Errorf("setpriority: %w", err)
	}
	return nil
}

// OnOwnThread runs f on an OS thread of its own that ends when f returns,
// so a niceness f gives its thread (and to the children it starts) dies with
// it and the rest of the process keeps its own.
func OnOwnThread(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: a goroutine that ends locked to its thread takes
		// the thread with it.
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Except the main thread, which the runtime parks for good
			// instead: hold it while another thread, which cannot be this
			// one, runs f.
			OnOwnThread(f)
			runtime.UnlockOSThread()
			return
		}
		f()
	}()
	<-done
}
