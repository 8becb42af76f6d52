// Package listening tells whether some socket of the host listens on a
// TCP port, from the kernel's socket tables (/proc/net/tcp and tcp6) and
// never by connecting: a probe must not be the first client a server
// sees.
package listening

import (
	"errors"
	"fmt"
	"os"

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

// TCP reports whether a socket of this network namespace listens on port,
// over IPv4 or IPv6. A table the kernel does not have (IPv6 disabled) has
// no listener.
func (p *Prober) TCP(port int) (bool, error) {
	for _, table := range []func() (procfs.NetTCP, error){p.fs.NetTCP, p.fs.NetTCP6} {
		lines, err := table()
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			// The parser's words quote the table; the caller's answer
			// needs only that it could not be read.
			return false, errors.New("the kernel's TCP socket table could not be read")
		}
		for _, l := range lines {
			if l.St == stateListen && l.LocalPort == uint64(port) {
				return true, nil
			}
		}
	}
	return false, nil
}
