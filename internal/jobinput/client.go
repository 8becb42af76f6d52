package jobinput

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/limits"
)

// ErrGone reports that no supervisor listens on the job's channel: the job
// has ended, or never was interactive.
var ErrGone = errors.New("no supervisor listens for the job's input")

// Send makes one exchange with the supervisor of the job in dir. A write
// that the job did not take whole within limits.InputWriteTimeout returns
// the part it took (Reply.Accepted) and leaves stdin open.
func Send(dir string, req Request) (Reply, error) {
	frame, err := encodeRequest(req)
	if err != nil {
		return Reply{}, err
	}
	deadline := time.Now().Add(limits.InputExchangeTimeout)
	conn, err := dial(dir, deadline)
	if err != nil {
		return Reply{}, err
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
	if _, err := conn.Write(frame); err != nil {
		return Reply{}, fmt.Errorf("send input: %w", err)
	}
	return readReply(conn)
}

// dial connects to the channel of the job in dir and checks that its
// listener runs as our user.
func dial(dir string, deadline time.Time) (*net.UnixConn, error) {
	// Connect through an O_PATH descriptor: a deep job directory does not
	// fit a socket address, and a symlink in the socket's place is refused.
	fd, err := unix.Open(filepath.Join(dir, SocketFile), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, ErrGone
	}
	if err != nil {
		return nil, fmt.Errorf("open input channel: %w", err)
	}
	defer unix.Close(fd)
	d := net.Dialer{Deadline: deadline}
	conn, err := d.Dial("unix", "/proc/self/fd/"+strconv.Itoa(fd))
	if errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ENOENT) {
		return nil, ErrGone
	}
	if err != nil {
		return nil, fmt.Errorf("connect input channel: %w", err)
	}
	uc := conn.(*net.UnixConn)
	if !samePeer(uc) {
		uc.Close()
		return nil, errors.New("input channel: the listener is not our user")
	}
	return uc, nil
}
