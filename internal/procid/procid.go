// Package procid identifies processes across time: a PID alone is reused by
// the kernel, so an identity is the PID together with its start time in
// clock ticks (/proc/<pid>/stat field 22) and the boot it belongs to.
package procid

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Identity names one process incarnation.
type Identity struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
}

// Source reads process identities from a proc file system. The boot ID is
// read through BootIDFunc so tests can simulate a reboot.
type Source struct {
	fs         procfs.FS
	root       string
	BootIDFunc func() (string, error)
}

// NewSource returns a Source over the proc file system mounted at root.
func NewSource(root string) (*Source, error) {
	fs, err := procfs.NewFS(root)
	if err != nil {
		return nil, fmt.Errorf("procfs %s: %w", root, err)
	}
	s := &Source{fs: fs, root: root}
	s.BootIDFunc = s.readBootID
	return s, nil
}

// Default is the Source over /proc.
func Default() *Source {
	s, err := NewSource(procfs.DefaultMountPoint)
	if err != nil {
		// /proc is always there on Linux; without it nothing here can work.
		panic(err)
	}
	return s
}

func (s *Source) readBootID() (string, error) {
	b, err := os.ReadFile(filepath.Join(s.root, "sys/kernel/random/boot_id"))
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// BootID returns the current boot ID.
func (s *Source) BootID() (string, error) { return s.BootIDFunc() }

// ErrGone reports that no process with the PID exists.
var ErrGone = errors.New("process gone")

// Lookup returns the identity of the live process pid and whether it is a
// zombie (exited, not yet reaped).
func (s *Source) Lookup(pid int) (Identity, bool, error) {
	if pid <= 0 {
		return Identity{}, false, ErrGone
	}
	p, err := s.fs.Proc(pid)
	if err != nil {
		return Identity{}, false, ErrGone
	}
	st, err := p.Stat()
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Identity{}, false, ErrGone
		}
		return Identity{}, false, fmt.Errorf("stat pid: %w", err)
	}
	return Identity{PID: pid, StartTicks: st.Starttime}, st.State == "Z", nil
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

// Signal sends sig to the process id, race-free: it pins the PID with a
// pidfd, then checks the start ticks of the pinned process before signalling.
func (s *Source) Signal(id Identity, sig unix.Signal) error {
	fd, err := unix.PidfdOpen(id.PID, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return ErrGone
		}
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(fd)
	cur, zombie, err := s.Lookup(id.PID)
	if err != nil {
		return err
	}
	if cur.StartTicks != id.StartTicks {
		return ErrMismatch
	}
	if zombie {
		return ErrGone
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return ErrGone
		}
		return fmt.Errorf("pidfd_send_signal: %w", err)
	}
	return nil
}

// GroupSurvivors returns the live members of the process group led by the
// recorded leader, which may itself be gone. The group is ours only while
// its ID is in use: if a process with the leader's PID exists with other
// start ticks, the ID was reused and nothing is returned.
func (s *Source) GroupSurvivors(leader Identity) ([]Identity, error) {
	if cur, zombie, err := s.Lookup(leader.PID); err == nil && !zombie && cur.StartTicks != leader.StartTicks {
		return nil, nil
	}
	procs, err := s.fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []Identity
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || st.PGRP != leader.PID || st.State == "Z" {
			continue
		}
		// Members of our group started no earlier than its leader.
		if st.Starttime < leader.StartTicks {
			continue
		}
		out = append(out, Identity{PID: p.PID, StartTicks: st.Starttime})
	}
	return out, nil
}
