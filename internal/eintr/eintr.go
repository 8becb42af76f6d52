// Package eintr is the one place system calls are retried when a signal
// interrupts them (EINTR), as the os package does for its own: some file
// systems (FUSE, NFS) interrupt open(2), and a read of a slow file may be
// interrupted by any signal the process handles. It imports nothing of
// ours, so the supervisor can use it within its memory budget.
package eintr

import "golang.org/x/sys/unix"

// Openat is openat(2) of path relative to dirfd (unix.AT_FDCWD for the
// working directory), retried on EINTR.
func Openat(dirfd int, path string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, path, flags, mode)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// Read is read(2), retried on EINTR.
func Read(fd int, p []byte) (int, error) {
	for {
		n, err := unix.Read(fd, p)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// Poll is poll(2), retried on EINTR with the same timeout.
func Poll(fds []unix.PollFd, timeoutMS int) (int, error) {
	for {
		n, err := unix.Poll(fds, timeoutMS)
		if err != unix.EINTR {
			return n, err
		}
	}
}
