package supervisor

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/niceness"
)

// autogroupRetry is how long to wait after the kernel refused a change for
// its rate limit: it takes one autogroup change every 100 ms from an
// unprivileged user, machine-wide, and a burst of launches contends for it.
const autogroupRetry = 100 * time.Millisecond

// sessionNice is the niceness the autogroups of a job's sessions are to get.
type sessionNice struct {
	nice int
	// files are /proc/PID/autogroup of the supervisor and, for a terminal
	// job (a session of its own), of the shell, opened while the shell is
	// our unreaped child: a file of a process that ended refuses writes
	// rather than reaching whoever reuses its PID.
	files []int
}

// openSessionNice prepares giving the job's sessions the supervisor's own
// niceness (the unit's Nice=, or the fallback's), when it is above 0. With
// autogroup scheduling (sched(7)) the kernel shares CPU between sessions
// first and weighs a process's niceness only within its session, and each
// job is a session of its own: by niceness alone a job would yield only to
// its own supervisor, not to the agent. It returns nil when there is
// nothing to do or no autogroup to change.
func openSessionNice(shell int, terminal bool) *sessionNice {
	n, err := niceness.Current()
	if err != nil || n <= 0 {
		return nil
	}
	s := &sessionNice{nice: n}
	pids := []int{unix.Getpid()}
	if terminal {
		pids = append(pids, shell)
	}
	for _, pid := range pids {
		fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/autogroup", unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			s.files = append(s.files, fd)
		}
	}
	if len(s.files) == 0 {
		return nil
	}
	return s
}

// apply sets each autogroup's niceness, retrying what the rate limit
// refuses for at most limits.SessionNiceTimeout. It gives up quietly
// otherwise: the processes keep their own niceness either way.
func (s *sessionNice) apply() {
	deadline := time.Now().Add(limits.SessionNiceTimeout)
	value := []byte(strconv.Itoa(s.nice))
	for _, fd := range s.files {
		for {
			_, err := unix.Write(fd, value)
			if !errors.Is(err, unix.EAGAIN) || time.Now().After(deadline) {
				break
			}
			time.Sleep(autogroupRetry + rand.N(autogroupRetry))
		}
		unix.Close(fd)
	}
}
