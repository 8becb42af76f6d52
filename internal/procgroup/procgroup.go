// Package procgroup signals and stops a job's process group, the one place
// that does. A group is addressed through its leader's identity, checked
// before every signal; the leader stays unreaped until its caller is done
// with the group, so neither its PID nor the group ID can be reused while
// a signal may still be sent.
package procgroup

import (
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/procid"
)

// groupPoll is how often Stopper.Wait checks whether the group has emptied
// before the SIGKILL deadline.
const groupPoll = 20 * time.Millisecond

// Group is the process group led by one process incarnation, a child of
// the caller that the caller has not reaped.
type Group struct {
	procs  *procid.Source
	leader procid.Identity
}

// Of returns the group led by the caller's unreaped child pid, with the
// child's identity.
func Of(procs *procid.Source, pid int) (*Group, error) {
	leader, _, err := procs.Lookup(pid)
	if err != nil {
		return nil, err
	}
	return &Group{procs: procs, leader: leader}, nil
}

// Leader is the identity of the group's leader.
func (g *Group) Leader() procid.Identity { return g.leader }

// Signal sends sig to the group if its leader is still the process it was.
// A nil group (one whose leader could not be identified) is signalled
// nothing rather than guessed at.
func (g *Group) Signal(sig unix.Signal) {
	if g == nil {
		return
	}
	cur, _, err := g.procs.Lookup(g.leader.PID)
	if err != nil || cur.StartTicks != g.leader.StartTicks {
		return
	}
	unix.Kill(-g.leader.PID, sig)
}

// AwaitExit blocks until the caller's child pid has exited, leaving it a
// zombie: its PID, and with it the group ID it leads, stay reserved until
// it is reaped.
func AwaitExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

// Stopper is a group being stopped: SIGTERM sent, SIGKILL due at a
// deadline. Kill or Wait ends it; after either returns no signal is sent,
// and only then may the leader be reaped.
type Stopper struct {
	g      *Group
	timer  *time.Timer
	killed chan struct{}
	once   sync.Once

	mu   sync.Mutex
	done bool
}

// Stop sends SIGTERM to the group and SIGKILL once grace has passed.
func (g *Group) Stop(grace time.Duration) *Stopper {
	s := &Stopper{g: g, killed: make(chan struct{})}
	g.Signal(unix.SIGTERM)
	s.timer = time.AfterFunc(grace, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.done {
			s.kill()
		}
	})
	return s
}

// Killed is closed once SIGKILL has been sent.
func (s *Stopper) Killed() <-chan struct{} { return s.killed }

// kill sends SIGKILL; s.mu is held.
func (s *Stopper) kill() {
	s.g.Signal(unix.SIGKILL)
	s.once.Do(func() { close(s.killed) })
}

// end ends the stop, sending SIGKILL first if kill.
func (s *Stopper) end(kill bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	s.done = true
	s.timer.Stop()
	if kill {
		s.kill()
	}
}

// Kill sends SIGKILL now (again, if the deadline did already) and ends
// the stop.
func (s *Stopper) Kill() { s.end(true) }

// Wait is for a group whose leader has exited: members that ignore SIGTERM
// get SIGKILL at the deadline, while the zombie leader still pins the
// group ID; a group that empties before then ends the stop without one.
func (s *Stopper) Wait() {
	defer s.end(false)
	if s.g == nil {
		return
	}
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	for {
		select {
		case <-s.killed:
			return
		case <-tick.C:
			if !hasLiveMembers(s.g.leader.PID) {
				return
			}
		}
	}
}

// hasLiveMembers reports whether the process group has members other than
// the zombie leader. Signal 0 succeeds for zombies too, so members are
// counted through /proc.
func hasLiveMembers(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		if g, err := unix.Getpgid(pid); err == nil && g == pgid {
			return true
		}
	}
	return false
}
