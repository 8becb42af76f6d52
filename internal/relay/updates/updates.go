// Package updates is what a relay knows of the agent binaries it serves,
// for keeping agents current: per architecture, the version and SHA-256
// of the binary at /download/commandcore-linux-ARCH, and the relay's
// policy (relay serve --agent-updates off|notify|auto). A linked agent of
// another version is outdated; it is offered the binary, and with auto
// asked to install it.
//
// What is served is package downloads': the relay's own binary for its
// own architecture, with the relay's version, and the binaries a release
// directory's SHA256SUMS names (relay serve --downloads, make release's
// layout), with the version its VERSION file states. The sums are the
// ones downloads serves. A release without VERSION offers only the
// relay's own binary, when it serves it.
package updates

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/downloads"
	"github.com/commandcore/commandcore/internal/transport"
)

// Mode is the relay's update policy.
type Mode string

// The policies.
const (
	// Off: nothing is offered, no agent is called outdated.
	Off Mode = "off"
	// Notify: outdated agents are offered the binary and shown as
	// outdated; they update when a person asks (the panel's Update,
	// commandcore update on the device).
	Notify Mode = "notify"
	// Auto: outdated agents are asked to update as they link.
	Auto Mode = "auto"
)

// ParseMode reads --agent-updates; "" is Notify.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return Notify, nil
	case Off, Notify, Auto:
		return m, nil
	}
	return "", errors.New("--agent-updates is off, notify or auto")
}

// VersionFile states a release's version, in its directory.
const VersionFile = "VERSION"

// maxVersionFile bounds a release's VERSION file.
const maxVersionFile = 128

// Config is what a catalog is made of.
type Config struct {
	Mode Mode
	// Version is the relay's own.
	Version string
	// Dir, when set, is the release directory downloads serves.
	Dir string
	// Sums is the SHA256SUMS downloads serves (downloads.Server.Sums).
	Sums func() ([]byte, error)
}

// Catalog is the binaries offered. Its methods may be called at once from
// many links.
type Catalog struct {
	mode Mode
	// version is the relay's; release is Dir's VERSION ("" without one),
	// released the binaries Dir's SHA256SUMS names.
	version, release string
	released         map[string]bool
	sums             func() ([]byte, error)

	once   sync.Once
	byName map[string]string // hex SHA-256 by file name, once read
}

// New reads cfg's release, if any.
func New(cfg Config) (*Catalog, error) {
	c := &Catalog{mode: cfg.Mode, version: cfg.Version, sums: cfg.Sums, released: map[string]bool{}}
	if c.mode == "" {
		c.mode = Notify
	}
	if c.mode == Off || cfg.Dir == "" {
		return c, nil
	}
	switch v, err := readBounded(filepath.Join(cfg.Dir, VersionFile), maxVersionFile); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("agent updates: %w", err)
	default:
		if c.release = strings.TrimSuffix(string(v), "\n"); !validVersion(c.release) {
			return nil, fmt.Errorf("agent updates: %s in %s is not one version of printable ASCII", VersionFile, cfg.Dir)
		}
	}
	data, err := readBounded(filepath.Join(cfg.Dir, downloads.SumsName), limits.DownloadsMaxSumsBytes)
	if err != nil {
		return nil, fmt.Errorf("agent updates: %w", err)
	}
	sums, err := downloads.ParseSums(data)
	if err != nil {
		return nil, fmt.Errorf("agent updates: %w", err)
	}
	for _, s := range sums {
		c.released[s.Name] = true
	}
	return c, nil
}

func readBounded(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("%s is over %d bytes", filepath.Base(path), max)
	}
	return b, nil
}

// Mode is the relay's policy.
func (c *Catalog) Mode() Mode { return c.mode }

// For is the offer for an agent of version on arch: the binary served for
// arch when its version is another, with Apply set under Auto. None under
// Off, for an architecture nothing is served for (or no version is known
// for), or when the sums cannot be had.
func (c *Catalog) For(arch, version string) (transport.Offer, bool) {
	if c.mode == Off || !validArch(arch) {
		return transport.Offer{}, false
	}
	name := downloads.BinaryName(arch)
	offered := ""
	switch {
	case c.released[name]:
		offered = c.release
	case arch == runtime.GOARCH && runtime.GOOS == "linux":
		offered = c.version
	}
	if !validVersion(offered) || offered == version {
		return transport.Offer{}, false
	}
	c.once.Do(c.readSums)
	sum, ok := c.byName[name]
	if !ok {
		return transport.Offer{}, false
	}
	return transport.Offer{Version: offered, SHA256: sum, Name: name, Apply: c.mode == Auto}, true
}

// readSums takes the sums downloads serves, once: they are fixed from the
// relay's start.
func (c *Catalog) readSums() {
	c.byName = map[string]string{}
	if c.sums == nil {
		return
	}
	data, err := c.sums()
	if err != nil {
		return
	}
	sums, err := downloads.ParseSums(data)
	if err != nil {
		return
	}
	for _, s := range sums {
		c.byName[s.Name] = fmt.Sprintf("%x", s.SHA256)
	}
}

// validArch reports whether arch can be an architecture's name (Go's
// spelling): 1 to 16 lowercase letters and digits.
func validArch(arch string) bool {
	if arch == "" || len(arch) > 16 {
		return false
	}
	return !strings.ContainsFunc(arch, func(r rune) bool { return !('a' <= r && r <= 'z' || '0' <= r && r <= '9') })
}

// validVersion reports whether v can be offered: 1 to 64 bytes of
// printable ASCII without spaces.
func validVersion(v string) bool {
	return v != "" && len(v) <= 64 && !strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r > '~' })
}
