// Package hideexec is the hide-exec role of the binary: it starts a program
// with the agent's state and config directories each covered by an empty
// read-only tmpfs and the directory of the agent's binary read-only (cut
// off from the user manager, its sockets covered and its configuration
// read-only too), in a mount namespace of its own, as job units have them
// (README). process.run starts its shell through it, and so does the
// no-systemd fallback its supervisor, with the job's own directory bound
// back in.
//
// The role is started in a new mount namespace, and, unless the agent may
// mount (CAP_SYS_ADMIN), in a new user namespace that maps the agent's
// uid and gid to themselves, the only way an ordinary user gets a mount
// namespace. It makes every mount a slave (nothing it mounts reaches the
// host; the host's new mounts still reach it), covers the directories,
// sets no_new_privs and execs the program: the PID, the process group and
// the start time stay those of the process the caller started, so
// signalling it by its identity keeps working.
//
// Every program sees the directory of the agent's binary read-only, so it
// cannot replace the binary the agent runs at its next start, and a
// program cut off from the user manager (the owner's permissions.json)
// also sees the manager's configuration read-only (its unit files,
// drop-ins and environment), so it leaves nothing there that the manager
// runs later, out of the cut. Each such directory is bound read-only over
// itself, and each directory on the way to it that the agent's user could
// rename is bound over itself (Pins): a mount point cannot be renamed or
// removed, so no rename puts another directory in its place.
//
// A program cut off also gets each of the manager's sockets covered by
// /dev/null, which refuses a connection; in the user namespace of an agent
// that is not root, the kernel refuses it the /proc/PID/root of every
// process outside, the way to the sockets around the cover.
//
// The program gets the environment the caller gave it; the variables the
// Go runtime reads at start travel past the role set aside (runtimeVars),
// and the role starts under its own (roleEnv).
//
// Its arguments are [--cover=SOCKET|--read-only=DIR]... STATE CONFIG BIND
// PATH ARG0 ARG..., fixed positions after the flags, BIND empty for none.
// The flags come first, so a role started by an agent older than them
// still reads its positions. They carry only the agent's own directories,
// the manager's sockets, the directories to see read-only and the
// program's argv, never a command (process.run's shell gets its command
// through cmdpipe, as before).
package hideexec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/roles"
)

// coverFlag starts an argument naming a socket to cover, readOnlyFlag one
// naming a directory to see read-only.
const (
	coverFlag    = "--cover="
	readOnlyFlag = "--read-only="
)

// ExitFailure is the role's exit status when it cannot hide the directories
// or start the program, as env(1) and nice(1) use 125 for their own
// failures: 126 and 127 stay the shell's.
const ExitFailure = 125

// runtimeVars are read by the Go runtime before the role's main runs. The
// role must not start under a command's values of them (a malformed
// GOMEMLIMIT stops it, GODEBUG=inittrace=1 writes to the command's
// stderr), so Wrap sets them aside under aside and the role puts them
// back for the program.
var runtimeVars = map[string]bool{"GODEBUG": true, "GOGC": true, "GOMEMLIMIT": true, "GOMAXPROCS": true, "GOTRACEBACK": true}

// aside prefixes a variable set aside. A variable whose name starts with
// it already gets it once more, so putting back is exact.
const aside = "COMMANDCORE_HIDE_EXEC_"

// roleEnv is the role's own runtime setting, which Main drops before the
// exec. The role runs one goroutine and execs within milliseconds: with
// one P the runtime starts fewer threads for the goroutines that package
// initialisers spawn (about 0.2 ms of the role's 4–5 ms start, BENCHMARKS.md
// "Starting a role").
const roleEnv = "GOMAXPROCS=1"

// Hider starts programs with the agent's directories hidden. Only Probe
// returns one, and only where hiding was seen to work.
type Hider struct {
	exe           string
	state, config string
	// userns: the agent cannot mount by itself, so the role gets a user
	// namespace too.
	userns bool
	// readOnly are seen read-only by every program (the directory of the
	// agent's binary); cutReadOnly (the user manager's configuration) and
	// sockets (the manager's, covered; those missing when it starts are
	// skipped) only by a program cut off from the user manager.
	readOnly, cutReadOnly, sockets []string
}

// Covers are what a Hider covers besides the agent's directories.
type Covers struct {
	// ReadOnly are directories every program sees read-only.
	ReadOnly []string
	// Sockets are the user manager's sockets, covered by /dev/null, and
	// CutReadOnly its configuration, seen read-only, for a program cut
	// off from it. Without CutReadOnly the Hider cuts nothing off (CanCut).
	Sockets, CutReadOnly []string
}

// CanCut reports whether h may start a program cut off from the user
// manager: it was probed with the manager's configuration to keep
// read-only, which a cut needs as much as the covered sockets.
func (h *Hider) CanCut() bool { return len(h.cutReadOnly) > 0 }

// Wrap has cmd, not yet started, run its program through the role with
// the directories hidden and, when bind is set, that directory (inside
// the state directory) bound back in, writable; the read-only
// directories are read-only; when cut, the user manager's sockets are
// covered and its configuration read-only too. cmd's SysProcAttr
// (Setpgid, Setsid, Pdeathsig) is kept.
func (h *Hider) Wrap(cmd *exec.Cmd, bind string, cut bool) {
	args := []string{h.exe, roles.HideExec}
	readOnly := h.readOnly
	if cut {
		for _, s := range h.sockets {
			args = append(args, coverFlag+s)
		}
		readOnly = append(slices.Clip(readOnly), h.cutReadOnly...)
	}
	for _, d := range readOnly {
		args = append(args, readOnlyFlag+d)
	}
	cmd.Args = append(append(args, h.state, h.config, bind, cmd.Path), cmd.Args...)
	cmd.Path = h.exe
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = make([]string, len(env), len(env)+1)
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if runtimeVars[name] || strings.HasPrefix(name, aside) {
			kv = aside + kv
		}
		cmd.Env[i] = kv
	}
	cmd.Env = append(cmd.Env, roleEnv)
	attr := &syscall.SysProcAttr{}
	if cmd.SysProcAttr != nil {
		copied := *cmd.SysProcAttr
		attr = &copied
	}
	attr.Cloneflags |= unix.CLONE_NEWNS
	if h.userns {
		attr.Cloneflags |= unix.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
		// An unprivileged process may map its gid only once setgroups is
		// denied.
		attr.GidMappingsEnableSetgroups = false
		// The role runs as the agent's uid, not as the namespace's root,
		// so it would lose at exec the power to mount that the namespace
		// gave it: an ambient capability carries it across, and the role
		// drops it before it execs the program.
		attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
	}
	cmd.SysProcAttr = attr
}

// canMount reports whether this process holds CAP_SYS_ADMIN. Such an agent
// (root) gets a mount namespace without a user namespace: in one, root
// would lose its power over every file and process of another user (an
// unmapped owner), which its commands have today.
func canMount() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_SYS_ADMIN) != 0
}

// startProbe runs the probe's command; a seam for the tests that simulate a
// host that refuses the namespaces.
var startProbe = (*exec.Cmd).Run

// probeTimeout bounds the probe: an agent must not wait at start-up on a
// role that never ends.
const probeTimeout = 5 * time.Second

// Probe finds out, with a throw-away run of the role (exe is the binary),
// whether a program started through it, cut off from the user manager,
// really cannot see the state and config directories, nor connect to the
// manager's sockets, nor write the read-only directories, while a
// directory bound back into the state directory stays writable. It
// returns the Hider where so, nil where not (user namespaces refused by a
// sysctl or an LSM): the caller then starts its programs as before. It
// leaves nothing behind.
func Probe(ctx context.Context, exe, state, config string, c Covers) *Hider {
	m, err := NewMarkers(state, config)
	if err != nil {
		return nil
	}
	defer m.Remove()
	h := &Hider{exe: exe, state: state, config: config, userns: !canMount(),
		readOnly: c.ReadOnly, cutReadOnly: c.CutReadOnly, sockets: c.Sockets}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", m.Argv(append(slices.Clip(c.ReadOnly), c.CutReadOnly...), c.Sockets)...)
	cmd.Dir = "/"
	h.Wrap(cmd, m.Bound, true)
	if startProbe(cmd) != nil || !m.OK() {
		return nil
	}
	return h
}

// Markers are a probe's test files: one in each directory to hide, which
// must be out of sight, and a directory inside the state directory to
// bind back in, where the probe writes "ok". The probe of job units uses
// them too.
type Markers struct {
	StateMark, ConfigMark, Bound string
}

// script runs in a probe: the markers must be out of sight, each path
// after them that readOnlyMark starts not writable (test -w asks access(2),
// which says EROFS of a read-only mount, also to root) and each other one
// no socket there, and the directory bound back in writable.
const script = `test ! -e "$1" && test ! -e "$2" && b=$3 && shift 3 && for s; do case $s in ` + readOnlyMark + `*) test ! -w "${s#` + readOnlyMark + `}" ;; *) test ! -S "$s" ;; esac || exit 1; done && : > "$b/ok"`

// readOnlyMark starts a probe's argument naming a directory to be
// read-only.
const readOnlyMark = "ro:"

// NewMarkers creates a probe's markers in state and config.
func NewMarkers(state, config string) (*Markers, error) {
	tag := make([]byte, 8)
	rand.Read(tag)
	name := ".hide-probe-" + hex.EncodeToString(tag)
	m := &Markers{StateMark: filepath.Join(state, name), ConfigMark: filepath.Join(config, name), Bound: filepath.Join(state, name+".d")}
	for _, p := range []string{m.StateMark, m.ConfigMark} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			m.Remove()
			return nil, err
		}
	}
	if err := os.Mkdir(m.Bound, 0o700); err != nil {
		m.Remove()
		return nil, err
	}
	return m, nil
}

// Argv is the arguments of a POSIX shell (after its name) that runs the
// probe's check, with directories that must be read-only and sockets that
// must not be reachable.
func (m *Markers) Argv(readOnly, sockets []string) []string {
	argv := []string{"-c", script, "probe", m.StateMark, m.ConfigMark, m.Bound}
	for _, d := range readOnly {
		argv = append(argv, readOnlyMark+d)
	}
	return append(argv, sockets...)
}

// OK reports whether the check passed.
func (m *Markers) OK() bool {
	_, err := os.Stat(filepath.Join(m.Bound, "ok"))
	return err == nil
}

// Remove deletes the markers.
func (m *Markers) Remove() {
	os.Remove(m.StateMark)
	os.Remove(m.ConfigMark)
	os.RemoveAll(m.Bound)
}

// Main is the role: args are [--cover=SOCKET|--read-only=DIR]... STATE
// CONFIG BIND PATH ARG0 ARG... (see the package comment). It returns only
// on failure, with ExitFailure, having said why on stderr without naming a
// path.
func Main(args []string, stderr io.Writer) int {
	var cover, readOnly []string
	for len(args) > 0 {
		if s, ok := strings.CutPrefix(args[0], coverFlag); ok {
			cover = append(cover, s)
		} else if d, ok := strings.CutPrefix(args[0], readOnlyFlag); ok {
			readOnly = append(readOnly, d)
		} else {
			break
		}
		args = args[1:]
	}
	if len(args) < 5 {
		fmt.Fprintf(stderr, "commandcore %s: started by the agent only\n", roles.HideExec)
		return ExitFailure
	}
	state, config, bind, path, argv := args[0], args[1], args[2], args[3], args[4:]
	// no_new_privs belongs to a thread: it must be set on the one that
	// execs.
	runtime.LockOSThread()
	if err := hide(state, config, bind, cover, readOnly); err != nil {
		fmt.Fprintf(stderr, "commandcore: %v\n", err)
		return ExitFailure
	}
	// The program starts without the capability the role mounted with.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		fmt.Fprintf(stderr, "commandcore: drop capabilities: %v\n", errno(err))
		return ExitFailure
	}
	// As a job unit's NoNewPrivileges=yes: no set-user-ID program or file
	// capability raises what the program may do.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(stderr, "commandcore: set no_new_privs: %v\n", errno(err))
		return ExitFailure
	}
	// Every runtime variable not set aside is the role's own (roleEnv).
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !runtimeVars[name] {
			env = append(env, strings.TrimPrefix(kv, aside))
		}
	}
	err := unix.Exec(path, argv, env)
	fmt.Fprintf(stderr, "commandcore: cannot start the shell: %v\n", errno(err))
	return ExitFailure
}

// hide makes the read-only directories read-only, covers state and
// config, binds bind back in, covers the sockets, and re-enters the
// working directory through the new mounts, so a working directory inside
// a hidden one leads nowhere.
func hide(state, config, bind string, sockets, readOnly []string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make mounts private: %v", errno(err))
	}
	wd, err := unix.Getwd()
	if err != nil {
		return fmt.Errorf("find the working directory: %v", errno(err))
	}
	bindFD := -1
	if bind != "" {
		// Held open, it names the directory after its path is covered.
		if bindFD, err = unix.Open(bind, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("open the job directory: %v", errno(err))
		}
		defer unix.Close(bindFD)
	}
	// First, so that the covers below stay on top of these binds.
	if err := makeReadOnly(readOnly); err != nil {
		return err
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	var covered []string
	for _, d := range []string{state, config} {
		// Writable until the bind's mount point is made in it.
		err := unix.Mount("tmpfs", d, "tmpfs", flags, "mode=0755")
		if errors.Is(err, unix.ENOENT) {
			// Already out of sight beneath the other one, or gone.
			continue
		}
		if err != nil {
			return fmt.Errorf("hide the agent's directories: %v", errno(err))
		}
		covered = append(covered, d)
	}
	if bindFD >= 0 {
		if err := os.MkdirAll(bind, 0o700); err != nil {
			return fmt.Errorf("bind the job directory: %v", errno(err))
		}
		if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", bindFD), bind, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind the job directory: %v", errno(err))
		}
	}
	for _, s := range sockets {
		// A bind only: what covers a socket is /dev/null itself, which
		// takes no connection, and a remount of it could fail on flags
		// the host locked on /dev.
		err := unix.Mount(os.DevNull, s, "", unix.MS_BIND, "")
		if errors.Is(err, unix.ENOENT) {
			// Not there (no bus), or already beneath a cover.
			continue
		}
		if err != nil {
			return fmt.Errorf("cover the user manager's sockets: %v", errno(err))
		}
	}
	for _, d := range covered {
		if err := unix.Mount("", d, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|flags, ""); err != nil {
			return fmt.Errorf("hide the agent's directories: %v", errno(err))
		}
	}
	if err := unix.Chdir(wd); err != nil {
		return errors.New("the working directory is inside the agent's own directories")
	}
	return nil
}

// makeReadOnly binds each of dirs read-only over itself, created first if
// missing (a directory that is not there could be made by the program),
// after binding each directory on the way to them that could be renamed
// over itself (Pins). Binds are recursive, so nothing mounted beneath is
// dropped.
func makeReadOnly(dirs []string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("make a directory read-only: %v", errno(err))
		}
	}
	for _, p := range Pins(dirs) {
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("pin a directory: %v", errno(err))
		}
	}
	for _, d := range dirs {
		if err := unix.Mount(d, d, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("make a directory read-only: %v", errno(err))
		}
		// A remount must keep the flags a less privileged namespace
		// cannot clear (nosuid, nodev, noexec, the atime ones).
		var st unix.Statfs_t
		if err := unix.Statfs(d, &st); err != nil {
			return fmt.Errorf("make a directory read-only: %v", errno(err))
		}
		flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY)
		for _, f := range keptFlags {
			if uintptr(st.Flags)&f.st != 0 {
				flags |= f.ms
			}
		}
		if err := unix.Mount("", d, "", flags, ""); err != nil {
			return fmt.Errorf("make a directory read-only: %v", errno(err))
		}
	}
	return nil
}

// keptFlags are the mount flags statfs(2) reports that a remount keeps.
var keptFlags = []struct{ st, ms uintptr }{
	{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
	{unix.ST_SYNCHRONOUS, unix.MS_SYNCHRONOUS}, {unix.ST_MANDLOCK, unix.MS_MANDLOCK},
	{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
}

// Pins returns the directories to bind over themselves so that none on
// the way to each of readOnly (each to be a mount point itself) can be
// renamed or removed, which would let a program put another directory in
// its place: a mount point cannot be (EBUSY), while a directory that only
// holds one can. They are the ancestors, "/" apart, whose parent this
// process may write, leaving out those in readOnly or inside one of them,
// shallowest first, each once.
func Pins(readOnly []string) []string {
	inside := func(p string) bool {
		for _, d := range readOnly {
			if p == d || strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/") {
				return true
			}
		}
		return false
	}
	var pins []string
	for _, d := range readOnly {
		for a := filepath.Dir(d); a != "/" && a != "."; a = filepath.Dir(a) {
			if !slices.Contains(pins, a) && !inside(a) && unix.Access(filepath.Dir(a), unix.W_OK) == nil {
				pins = append(pins, a)
			}
		}
	}
	slices.SortFunc(pins, func(a, b string) int {
		if c := strings.Count(a, "/") - strings.Count(b, "/"); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return pins
}

// errno strips a path from an error, leaving the system's reason.
func errno(err error) error {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return err
}
