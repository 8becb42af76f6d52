// Package listening tells whether one of a set of processes listens on a
// TCP port, from the kernel's socket tables (/proc/net/tcp and tcp6) and
// the processes' descriptors (/proc/PID/fd), never by connecting: a probe
// must not be the first client a server sees, and another program on the
// port is not the one the caller waits for.
package listening

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// stateListen is TCP_LISTEN in the kernel's socket tables.
const stateListen = 0x0A

// Prober reads the socket tables under one proc root.
type Prober struct {
	fs procfs.FS
}

// New returns a Prober of the proc file system at root ("/proc").
func New(root string) (*Prober, error) {
	fs, err := procfs.NewFS(root)
	if err != nil {
		return nil, fmt.Errorf("open proc file system: %w", err)
	}
	return &Prober{fs: fs}, nil
}

// TCP reports whether a socket of this network namespace that one of the
// processes pids names holds open listens on port, over IPv4 or IPv6.
// pids is asked only when some socket listens there. A table the kernel
// does not have (IPv6 disabled) has no listener; a process that is gone
// or whose descriptors cannot be read holds none.
func (p *Prober) TCP(port int, pids func() ([]int, error)) (bool, error) {
	inodes, err := p.listeners(port)
	if err != nil || len(inodes) == 0 {
		return false, err
	}
	ps, err := pids()
	if err != nil {
		return false, err
	}
	for _, pid := range ps {
		if p.holds(pid, inodes) {
			return true, nil
		}
	}
	return false, nil
}

// listeners returns the inodes of the sockets listening on port.
func (p *Prober) listeners(port int) (map[uint64]bool, error) {
	inodes := map[uint64]bool{}
	for _, table := range []func() (procfs.NetTCP, error){p.fs.NetTCP, p.fs.NetTCP6} {
		lines, err := table()
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			// The parser's words quote the table; the caller's answer
			// needs only that it could not be read.
			return nil, errors.New("the kernel's TCP socket table could not be read")
		}
		for _, l := range lines {
			if l.St == stateListen && l.LocalPort == uint64(port) {
				inodes[l.Inode] = true
			}
		}
	}
	return inodes, nil
}

// holds reports whether process pid has one of the sockets inodes open.
func (p *Prober) holds(pid int, inodes map[uint64]bool) bool {
	proc, err := p.fs.Proc(pid)
	if err != nil {
		return false
	}
	targets, err := proc.FileDescriptorTargets()
	if err != nil {
		return false
	}
	for _, t := range targets {
		n, ok := strings.CutPrefix(t, "socket:[")
		if !ok {
			continue
		}
		inode, err := strconv.ParseUint(strings.TrimSuffix(n, "]"), 10, 64)
		if err == nil && inodes[inode] {
			return true
		}
	}
	return false
}
