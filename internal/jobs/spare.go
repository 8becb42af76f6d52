package jobs

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/envelope"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobresources"
	"github.com/commandcore/commandcore/internal/launcher"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/procid"
)

// A spare is a job unit started ahead of its job: its supervisor is up,
// announced READY and waits on its stdin for an envelope. Most of a launch
// is the user manager's fork, cgroup attach and exec and the supervisor's
// own start, so a job handed to a spare starts in the time of its
// admission and the envelope's write. A spare is made after each launch and
// serves a job only when its unit is the one the job would get: the same
// resources, the same cut, no time limit (systemd does not change a running
// unit's RuntimeMaxSec). Its claim, and so the job's start time, comes when
// its job arrives.
type spare struct {
	id      string
	lock    *os.File // the spare directory's lock, held
	w       *os.File // the envelope pipe's write end
	started *launcher.Started
	// sup is the supervisor, the unit's main process, identified after it
	// was READY, while no job's code ran in the unit; nil until then.
	sup  *procid.Identity
	caps jobresources.Caps
	cut  bool
	idle *time.Timer
}

// handOverPoll is how often a launch handed to a spare looks for its
// claim: the supervisor is up, and the claim comes within a millisecond or
// two of the envelope.
const handOverPoll = 250 * time.Microsecond

// spares is the one spare a service keeps, when it keeps one.
type spares struct {
	mu    sync.Mutex
	on    bool
	ready *spare
	// making is closed when the spare being started, for jobs under
	// makingCaps and makingCut as the job makingID, is kept or given up;
	// nil when none is.
	making     chan struct{}
	makingID   string
	makingCaps jobresources.Caps
	makingCut  bool
	// idle is how long a spare waits for a job; zero means
	// limits.SpareIdle.
	idle time.Duration
}

// KeepSpares makes the service start a spare after each launch in a
// systemd unit, for the next job.
func (s *Service) KeepSpares() {
	s.spares.mu.Lock()
	s.spares.on = true
	s.spares.mu.Unlock()
}

// takeSpare returns the spare for a job with these resources, cut and time
// limit in domain, or nil. A spare that does not fit a job without a time
// limit is out of date (the owner's policy changed) and dismissed. When the
// spare for such a job is still starting, the launch waits for it rather
// than start a unit beside it: the manager starts units one at a time, so
// a second start would only queue behind the spare's.
func (s *Service) takeSpare(ctx context.Context, domain string, caps jobresources.Caps, cut bool, timeout time.Duration) *spare {
	if domain != jobmeta.DomainSystemdUnit || timeout > 0 {
		return nil
	}
	s.spares.mu.Lock()
	sp := s.spares.ready
	s.spares.ready = nil
	making := s.spares.making
	if sp != nil || making == nil || !s.spares.makingCaps.Same(caps) || s.spares.makingCut != cut {
		making = nil
	}
	s.spares.mu.Unlock()
	if making != nil {
		select {
		case <-making:
		case <-ctx.Done():
			return nil
		}
		s.spares.mu.Lock()
		sp = s.spares.ready
		s.spares.ready = nil
		s.spares.mu.Unlock()
	}
	if sp == nil {
		return nil
	}
	sp.idle.Stop()
	if !sp.caps.Same(caps) || sp.cut != cut || !sp.waiting() {
		s.dismiss(sp)
		return nil
	}
	return sp
}

// waiting reports whether the spare's envelope pipe still has a reader:
// once its supervisor is gone and the manager has let go of its copy, the
// write end reports an error.
func (sp *spare) waiting() bool {
	// Through the raw descriptor: Fd would make the pipe blocking, and
	// the envelope's write deadline needs it non-blocking.
	rc, err := sp.w.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, 0)
		ok = err == nil && (n == 0 || fds[0].Revents&(unix.POLLERR|unix.POLLHUP) == 0)
	})
	return ok
}

// returnSpare keeps a spare that a job was not admitted into.
func (s *Service) returnSpare(sp *spare) {
	s.spares.mu.Lock()
	defer s.spares.mu.Unlock()
	if !s.spares.on || s.spares.ready != nil {
		go s.dismiss(sp)
		return
	}
	s.keep(sp)
}

// keep makes sp the ready spare until it waited its idle time. Called
// holding s.spares.mu.
func (s *Service) keep(sp *spare) {
	s.spares.ready = sp
	idle := s.spares.idle
	if idle == 0 {
		idle = limits.SpareIdle
	}
	sp.idle = time.AfterFunc(idle, func() {
		s.spares.mu.Lock()
		mine := s.spares.ready == sp
		if mine {
			s.spares.ready = nil
		}
		s.spares.mu.Unlock()
		if mine {
			s.dismiss(sp)
		}
	})
}

// refillSpare starts a spare for jobs with these resources and cut, in
// the background, unless the service keeps none or has one.
func (s *Service) refillSpare(caps jobresources.Caps, cut bool) {
	s.spares.mu.Lock()
	if !s.spares.on || s.spares.ready != nil || s.spares.making != nil {
		s.spares.mu.Unlock()
		return
	}
	done, id := make(chan struct{}), uuid.NewString()
	s.spares.making, s.spares.makingID, s.spares.makingCaps, s.spares.makingCut = done, id, caps, cut
	s.spares.mu.Unlock()
	go func() {
		if s.slowSpareStart != nil {
			s.slowSpareStart()
		}
		sp := s.startSpare(id, caps, cut)
		if !s.keepMade(sp, done) {
			return
		}
		// Identified once kept, so that a launch waiting for the spare
		// need not wait for this too; a spare taken before it is
		// identified has its job's supervisor identified after the launch.
		ctx, cancel := context.WithTimeout(context.Background(), unitQueryTimeout)
		defer cancel()
		sup := s.unitSupervisor(ctx, launcher.UnitName(s.deviceID, id))
		s.spares.mu.Lock()
		if s.spares.ready == sp {
			sp.sup = sup
		}
		s.spares.mu.Unlock()
	}()
}

// keepMade ends the making of spare sp, which done announces, and keeps it
// unless the service keeps none or has one; it reports whether it did.
func (s *Service) keepMade(sp *spare, done chan struct{}) bool {
	s.spares.mu.Lock()
	defer s.spares.mu.Unlock()
	s.spares.making = nil
	defer close(done)
	if sp == nil {
		return false
	}
	if !s.spares.on || s.spares.ready != nil {
		go s.dismiss(sp)
		return false
	}
	s.keep(sp)
	return true
}

// startSpare starts the unit of spare id and waits for its READY; nil
// when it could not.
func (s *Service) startSpare(id string, caps jobresources.Caps, cut bool) *spare {
	lock, err := s.store.PrepareSpare(id)
	if err != nil {
		return nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		s.store.DismissSpare(id, lock)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), limits.ClaimTimeout)
	defer cancel()
	sp := &spare{id: id, lock: lock, w: w, caps: caps, cut: cut}
	sp.started, err = s.launcher.Start(ctx, jobmeta.DomainSystemdUnit, launcher.Spec{
		Unit: launcher.UnitName(s.deviceID, id), JobDir: s.store.Dir(id), Stdin: r, Resources: caps, CutOff: cut,
	})
	// The manager holds its own copy of the read end once it answered.
	r.Close()
	if err != nil {
		w.Close()
		s.store.DismissSpare(id, lock)
		return nil
	}
	// Without a READY to wait for (it goes astray on this manager), a
	// spare is never known to be up: keep none.
	if sp.started.Ready != nil {
		select {
		case <-sp.started.Ready:
			return sp
		case <-sp.started.Failed:
		case <-ctx.Done():
		}
	}
	sp.started.Stop(context.Background())
	s.dismiss(sp)
	return nil
}

// handOver sends env to the spare's supervisor and returns the launch to
// wait on, and the envelope's outcome. The claim is awaited as for any
// unit, without READY (the spare sent it before its job); a spare that is
// gone (its pipe has no reader) fails the launch at once rather than at
// the claim timeout.
func (sp *spare) handOver(env *envelope.Envelope, timeout time.Duration) (*launcher.Started, <-chan error) {
	wrote := sendEnvelope(sp.w, env, timeout)
	out, failed := make(chan error, 1), make(chan struct{})
	st := *sp.started
	st.Ready, st.Failed = nil, failed
	go func() {
		err := <-wrote
		if err != nil {
			close(failed)
		}
		out <- err
	}()
	return &st, out
}

// dismiss ends a spare that serves no job: without an envelope its
// supervisor exits, and its directory goes.
func (s *Service) dismiss(sp *spare) {
	sp.w.Close()
	s.store.DismissSpare(sp.id, sp.lock)
}

// closeSpares dismisses the ready spare and keeps no more.
func (s *Service) closeSpares() {
	s.spares.mu.Lock()
	s.spares.on = false
	sp := s.spares.ready
	s.spares.ready = nil
	s.spares.mu.Unlock()
	if sp != nil {
		sp.idle.Stop()
		s.dismiss(sp)
	}
}
