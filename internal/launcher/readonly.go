package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// BinaryDir is the directory of the agent's binary as jobs meet it. The
// user manager runs the binary at the agent's next start, restart or
// update, so a job that could put another file in its place would run as
// the agent then, outside every cover.
type BinaryDir struct {
	// Dir is the directory of the binary the agent runs, symbolic links
	// resolved (the unit's ExecStart names it so); empty when unknown.
	Dir string
	// Writable: the agent's user may write Dir or the binary, so a job
	// could replace the binary unless it sees Dir read-only.
	Writable bool
	// Shared: Dir is one jobs need to write, and is left writable: the
	// home directory or one above it, a sticky directory such as /tmp, or
	// a system directory of commands such as /usr/bin, where an agent run
	// as root has its jobs install packages.
	Shared bool
}

// ReadOnly reports whether jobs are to see Dir read-only.
func (b BinaryDir) ReadOnly() bool { return b.Dir != "" && b.Writable && !b.Shared }

// commandDirs are the system's directories of commands.
var commandDirs = []string{"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"}

// AgentBinary finds the directory of exe, the agent's binary, and whether
// jobs are to see it read-only. The whole directory rather than the binary
// and its .previous copy: see hideProperties.
func AgentBinary(exe string) BinaryDir {
	if exe == "" {
		return BinaryDir{}
	}
	real, err := filepath.EvalSymlinks(exe)
	if err != nil {
		return BinaryDir{}
	}
	dir := filepath.Dir(real)
	b := BinaryDir{Dir: dir, Writable: unix.Access(dir, unix.W_OK) == nil || unix.Access(real, unix.W_OK) == nil}
	b.Shared = dir == "/" || slices.Contains(commandDirs, dir)
	if fi, err := os.Stat(dir); err == nil && fi.Mode()&os.ModeSticky != 0 {
		b.Shared = true
	}
	if home, err := os.UserHomeDir(); err == nil {
		for _, h := range []string{home, resolved(home)} {
			if h == dir || strings.HasPrefix(h, dir+"/") {
				b.Shared = true
			}
		}
	}
	return b
}

// resolved is p with its symbolic links resolved, or p.
func resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// ManagerConfig returns the directories the user manager reads what it
// runs later from that its user may write: $XDG_CONFIG_HOME/systemd (unit
// files and their drop-ins, user.control, the manager's own user.conf),
// $XDG_CONFIG_HOME/environment.d (the environment it gives every unit),
// $XDG_DATA_HOME/systemd (unit files too) and $XDG_RUNTIME_DIR/systemd
// (runtime unit files, also under /run/user/UID), the defaults under
// $HOME. A job cut off from the manager sees them read-only: one that
// could write there would start outside the cut at the manager's next
// start or reload. The runtime ones are given only where their parent
// exists (it is the system's to make). ok is false without a home
// directory, or where a symbolic link on the way to one of them sits in a
// directory the user may write: a job could point it elsewhere, and no
// mount holds a link in place.
func ManagerConfig() (dirs []string, ok bool) {
	home := os.Getenv("HOME")
	xdg := func(name, under string) string {
		if v := os.Getenv(name); filepath.IsAbs(v) {
			return filepath.Clean(v)
		}
		if !filepath.IsAbs(home) {
			return ""
		}
		return filepath.Join(home, under)
	}
	config, data := xdg("XDG_CONFIG_HOME", ".config"), xdg("XDG_DATA_HOME", filepath.Join(".local", "share"))
	if config == "" || data == "" {
		return nil, false
	}
	dirs = []string{filepath.Join(config, "systemd"), filepath.Join(config, "environment.d"), filepath.Join(data, "systemd")}
	for _, run := range []string{os.Getenv("XDG_RUNTIME_DIR"), fmt.Sprintf("/run/user/%d", os.Getuid())} {
		if fi, err := os.Stat(run); filepath.IsAbs(run) && err == nil && fi.IsDir() {
			if d := filepath.Join(resolved(run), "systemd"); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	for _, d := range dirs {
		if !heldInPlace(d) {
			return nil, false
		}
	}
	return dirs, true
}

// heldInPlace reports whether no symbolic link on the way to p (as far as
// it exists) sits in a directory this process may write.
func heldInPlace(p string) bool {
	for a := p; a != "/" && a != "."; a = filepath.Dir(a) {
		fi, err := os.Lstat(a)
		if err == nil && fi.Mode()&os.ModeSymlink != 0 && unix.Access(filepath.Dir(a), unix.W_OK) == nil {
			return false
		}
	}
	return true
}
