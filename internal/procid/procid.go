// Package procid identifies processes across time: a PID alone is reused by
// the kernel, so an identity is the PID together with its start time in
// clock ticks (/proc/<pid>/stat field 22) and the boot it belongs to.
package procid

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/eintr"
)

// Identity names one process incarnation.
type Identity struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
}

// Source reads process identities from a proc file system. The boot ID is
// read through BootIDFunc so tests can simulate a reboot.
type Source struct {
	root       string
	BootIDFunc func() (string, error)

	// The boot ID cannot change under a running process, so it is read
	// once: a listing asks for it once per live job.
	bootOnce sync.Once
	bootID   string
	bootErr  error
}

// NewSource returns a Source over the proc file system mounted at root.
func NewSource(root string) (*Source, error) {
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("proc file system %s: not a directory (%v)", root, err)
	}
	s := &Source{root: root}
	s.BootIDFunc = s.readBootID
	return s, nil
}

// Default is the Source over /proc.
func Default() *Source {
	s, err := NewSource("/proc")
	if err != nil {
		// /proc is always there on Linux; without it nothing here can work.
		panic(err)
	}
	return s
}

func (s *Source) readBootID() (string, error) {
	s.bootOnce.Do(func() {
		b, err := os.ReadFile(filepath.Join(s.root, "sys/kernel/random/boot_id"))
		if err != nil {
			s.bootErr = fmt.Errorf("read boot id: %w", err)
			return
		}
		s.bootID = strings.TrimSpace(string(b))
	})
	return s.bootID, s.bootErr
}

// BootID returns the current boot ID.
func (s *Source) BootID() (string, error) { return s.BootIDFunc() }

// ErrGone reports that no process with the PID exists.
var ErrGone = errors.New("process gone")

// Lookup returns the identity of the live process pid and whether it is a
// zombie (exited, not yet reaped).
func (s *Source) Lookup(pid int) (Identity, bool, error) {
	// A PID under 1 (an unset one) has no /proc entry: gone, as a process
	// that ended.
	st, err := s.stat(pid)
	if err != nil {
		return Identity{}, false, err
	}
	return Identity{PID: pid, StartTicks: st.startTicks}, st.state == 'Z', nil
}

// procStat is what this package reads of /proc/<pid>/stat.
type procStat struct {
	state      byte
	pgrp       int
	startTicks uint64
}

// statMax bounds a stat line: 52 numeric fields of at most 20 digits and a
// command name of at most 64 bytes fit with room to spare.
const statMax = 2048

// stat reads process pid's stat file; ErrGone when there is no such
// process (also when it went between the open and the read). It reads with
// plain system calls, one read into a buffer on the stack: os.File would
// also stat the file and try to register it with the poller, and a listing
// does this for every live job.
func (s *Source) stat(pid int) (procStat, error) {
	path := filepath.Join(s.root, strconv.Itoa(pid), "stat")
	fd, err := eintr.Openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT || err == unix.ESRCH {
		return procStat{}, ErrGone
	}
	if err != nil {
		return procStat{}, fmt.Errorf("stat pid: %w", err)
	}
	var buf [statMax]byte
	n, err := eintr.Read(fd, buf[:])
	unix.Close(fd)
	if err == unix.ESRCH {
		return procStat{}, ErrGone
	}
	if err != nil {
		return procStat{}, fmt.Errorf("stat pid: %w", err)
	}
	st, err := parseStat(buf[:max(n, 0)])
	if err != nil {
		return procStat{}, fmt.Errorf("stat pid: %w", err)
	}
	return st, nil
}

var errStatFormat = errors.New("malformed stat line")

// parseStat reads a stat line's state (field 3), process group (field 5)
// and start time in clock ticks (field 22). The command name (field 2) is
// parenthesised and may hold anything, spaces and ')' too, so the fields
// after it start at its last ')'. It replaces procfs's parser, which scans
// every field with fmt and was most of a process.jobs listing's CPU.
func parseStat(data []byte) (procStat, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, errStatFormat
	}
	// After the name: state is field 3, so field n is rest[n-3].
	rest := bytes.Fields(data[i+1:])
	if len(rest) < 22-2 || len(rest[0]) != 1 {
		return procStat{}, errStatFormat
	}
	pgrp, err := strconv.Atoi(string(rest[5-3]))
	if err != nil {
		return procStat{}, errStatFormat
	}
	start, err := strconv.ParseUint(string(rest[22-3]), 10, 64)
	if err != nil {
		return procStat{}, errStatFormat
	}
	return procStat{state: rest[0][0], pgrp: pgrp, startTicks: start}, nil
}

// Self returns the calling process's identity.
func (s *Source) Self() (Identity, error) {
	id, _, err := s.Lookup(os.Getpid())
	return id, err
}

// Alive reports whether the process id still exists (not a zombie) as the
// same incarnation. A PID now used by another process is not alive.
func (s *Source) Alive(id Identity) (bool, error) {
	cur, zombie, err := s.Lookup(id.PID)
	if errors.Is(err, ErrGone) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return cur.StartTicks == id.StartTicks && !zombie, nil
}

// ErrMismatch reports that a PID now belongs to another process.
var ErrMismatch = errors.New("process identity does not match")

// Pin holds one process incarnation by a pidfd: what it says stays about
// that process even once its PID is reused. Close it when done; one
// dropped unclosed is closed when collected.
type Pin struct {
	f *os.File
}

// Pin pins the process id, race-free: it opens a pidfd for the PID, then
// checks the start ticks of the pinned process. ErrGone when the process
// is gone or a zombie, ErrMismatch when the PID is another process's.
func (s *Source) Pin(id Identity) (*Pin, error) {
	fd, err := unix.PidfdOpen(id.PID, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, ErrGone
		}
		return nil, fmt.Errorf("pidfd_open: %w", err)
	}
	p := &Pin{f: os.NewFile(uintptr(fd), "pidfd")}
	cur, zombie, err := s.Lookup(id.PID)
	switch {
	case err != nil:
	case cur.StartTicks != id.StartTicks:
		err = ErrMismatch
	case zombie:
		err = ErrGone
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Exited reports whether the pinned process has exited: one poll of its
// pidfd, which is readable from its exit on (a zombie has exited).
func (p *Pin) Exited() (bool, error) {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return false, fmt.Errorf("poll pidfd: %w", err)
	}
	var perr error
	fds := []unix.PollFd{{Events: unix.POLLIN}}
	if err := rc.Control(func(fd uintptr) {
		fds[0].Fd = int32(fd)
		_, perr = eintr.Poll(fds, 0)
	}); err != nil {
		return false, fmt.Errorf("poll pidfd: %w", err)
	}
	if perr != nil {
		return false, fmt.Errorf("poll pidfd: %w", perr)
	}
	// No event leaves Revents zero.
	return fds[0].Revents&unix.POLLIN != 0, nil
}

// Signal sends sig to the pinned process; ErrGone once it has exited.
func (p *Pin) Signal(sig unix.Signal) error {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("pidfd_send_signal: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), sig, nil, 0) }); err != nil {
		return fmt.Errorf("pidfd_send_signal: %w", err)
	}
	if errors.Is(serr, unix.ESRCH) {
		return ErrGone
	}
	if serr != nil {
		return fmt.Errorf("pidfd_send_signal: %w", serr)
	}
	return nil
}

// Close releases the pidfd.
func (p *Pin) Close() error { return p.f.Close() }

// Signal sends sig to the process id, race-free: it pins the process
// (Pin) and signals the pinned one.
func (s *Source) Signal(id Identity, sig unix.Signal) error {
	p, err := s.Pin(id)
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Signal(sig)
}

// GroupSurvivors returns the live members of the process group led by the
// recorded leader, which may itself be gone. The group is ours only while
// its ID is in use: if a process with the leader's PID exists with other
// start ticks, the ID was reused and nothing is returned.
func (s *Source) GroupSurvivors(leader Identity) ([]Identity, error) {
	if cur, zombie, err := s.Lookup(leader.PID); err == nil && !zombie && cur.StartTicks != leader.StartTicks {
		return nil, nil
	}
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []Identity
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := s.stat(pid)
		if err != nil || st.pgrp != leader.PID || st.state == 'Z' {
			continue
		}
		// Members of our group started no earlier than its leader.
		if st.startTicks < leader.StartTicks {
			continue
		}
		out = append(out, Identity{PID: pid, StartTicks: st.startTicks})
	}
	return out, nil
}
