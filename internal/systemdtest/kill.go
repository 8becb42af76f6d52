package systemdtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	godbus "github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

// hierarchy is a mounted cgroup hierarchy the manager's cgroup lives in.
type hierarchy struct {
	root    string
	unified bool
}

// hierarchies returns the cgroup2 hierarchy (unified) and, on hybrid hosts,
// the v1 name=systemd one. systemd needs its cgroup in both.
func hierarchies() ([]hierarchy, error) {
	var hs []hierarchy
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var st unix.Statfs_t
		if unix.Statfs(root, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			hs = append(hs, hierarchy{root: root, unified: true})
			break
		}
	}
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup/systemd", &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC {
		hs = append(hs, hierarchy{root: "/sys/fs/cgroup/systemd"})
	}
	if len(hs) == 0 {
		return nil, errors.New("systemdtest: no cgroup hierarchy for systemd found")
	}
	return hs, nil
}

// CgroupDirs returns the manager's user@U.service directories, one per
// cgroup hierarchy (unified first).
func (m *Manager) CgroupDirs() []string {
	hs, _ := hierarchies()
	var dirs []string
	for _, h := range hs {
		dirs = append(dirs, h.root+m.cgroupRel)
	}
	return dirs
}

// Procs lists every PID in the manager's user@U.service cgroup, recursively:
// the manager and all processes of its units, including orphans of a killed
// manager.
func (m *Manager) Procs() ([]int, error) {
	var pids []int
	for _, dir := range m.CgroupDirs() {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if cgroupGone(err) {
					return nil // removed under us, or never created
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			got, err := readProcs(filepath.Join(path, "cgroup.procs"))
			pids = append(pids, got...)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// cgroupGone reports whether err means a cgroup directory vanished: systemd
// removes unit cgroups while we walk them (ENODEV is what reading a file of a
// just-removed cgroup gives).
func cgroupGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV)
}

// managerCandidates lists the PIDs where the manager itself lives: its
// init.scope, or the service cgroup proper before it moved (the boot shell).
func (m *Manager) managerCandidates() ([]int, error) {
	var pids []int
	for _, dir := range m.CgroupDirs() {
		for _, f := range []string{dir + "/cgroup.procs", dir + "/init.scope/cgroup.procs"} {
			got, err := readProcs(f)
			if err != nil {
				return nil, err
			}
			pids = append(pids, got...)
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

func readProcs(path string) ([]int, error) {
	data, err := os.ReadFile(path)
	if cgroupGone(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// inCgroup reports whether pid is in the manager's user@U.service cgroup.
func (m *Manager) inCgroup(pid int) (bool, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "0::/path" (unified) or "N:name=systemd:/path" (v1).
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || (parts[1] != "" && parts[1] != "name=systemd") {
			continue
		}
		if p := parts[2]; p == m.cgroupRel || strings.HasPrefix(p, m.cgroupRel+"/") {
			return true, nil
		}
	}
	return false, sc.Err()
}

// proc is a process pinned by a pidfd, so signals cannot hit a recycled PID.
type proc struct {
	pid int
	fd  int
}

// errGone means the process had already exited (or been reaped).
var errGone = errors.New("process already gone")

// openProc pins pid and checks that it is inside the manager's cgroup: this
// package never signals anything else.
func (m *Manager) openProc(pid int) (*proc, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil, errGone
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	p := &proc{pid: pid, fd: fd}
	ok, err := m.inCgroup(pid)
	// Signal 0 after the check proves /proc/PID still was the pinned process.
	if alive := unix.PidfdSendSignal(fd, 0, nil, 0); alive != nil || errors.Is(err, fs.ErrNotExist) {
		p.close()
		return nil, errGone
	}
	if err != nil || !ok {
		p.close()
		if err == nil {
			err = fmt.Errorf("pid %d is not in %s; refusing to signal it", pid, m.cgroupRel)
		}
		return nil, err
	}
	return p, nil
}

func (p *proc) close() { unix.Close(p.fd) }

func (p *proc) signal(sig unix.Signal) error {
	err := unix.PidfdSendSignal(p.fd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil // exited meanwhile
	}
	return err
}

// wait waits until the process has exited. A zombie counts: PID 1 here reaps
// slowly, so kill(pid, 0) keeps succeeding long after the process is dead,
// but the pidfd becomes readable as soon as it exits.
func (p *proc) wait(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms < 0 {
			return fmt.Errorf("pid %d still running after %v", p.pid, timeout)
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
	}
}

// killAndWait sends sig to pid (if it is in the manager's cgroup) and waits
// for it to exit.
func (m *Manager) killAndWait(pid int, sig unix.Signal) error {
	p, err := m.openProc(pid)
	if errors.Is(err, errGone) {
		return nil
	}
	if err != nil {
		return err
	}
	defer p.close()
	if err := p.signal(sig); err != nil {
		return err
	}
	return p.wait(stopTimeout)
}

// KillManagerOnly SIGKILLs the running systemd --user process alone, as a
// crash would. Its units' processes survive in their cgroups (reparented to
// PID 1). Call Ensure afterwards to boot a new manager.
func (m *Manager) KillManagerOnly() error {
	return underBootLock(func() error {
		pid, err := m.CurrentPID()
		if err != nil {
			return err
		}
		return m.killAndWait(pid, unix.SIGKILL)
	})
}

// KillManagerCgroup kills every process in the user@U.service cgroup, the
// manager included, as the system manager does on a systemd host when it
// stops or kills user@U.service. The cgroup directories are left behind.
func (m *Manager) KillManagerCgroup() error {
	return underBootLock(func() error {
		var mgr *proc
		if pid, err := m.CurrentPID(); err == nil {
			if mgr, err = m.openProc(pid); err != nil && !errors.Is(err, errGone) {
				return err
			}
		}
		if mgr != nil {
			defer mgr.close()
		}
		if err := m.killCgroup(); err != nil {
			return err
		}
		if mgr != nil {
			return mgr.wait(stopTimeout)
		}
		return nil
	})
}

// underBootLock runs fn, which kills or stops the user manager, under the
// boot lock, and never on a host whose PID 1 is systemd.
func underBootLock(fn func() error) error {
	if hostRunsSystemd() {
		return errHostSystemd
	}
	unlock, err := lockFile(bootLockPath, unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	return fn()
}

var errHostSystemd = errors.New("systemdtest: PID 1 is systemd; the user manager belongs to the host, refusing to kill it")

// killCgroup SIGKILLs everything in the user@U.service cgroup and waits until
// it is empty.
func (m *Manager) killCgroup() error {
	dirs := m.CgroupDirs()
	if len(dirs) == 0 {
		return nil
	}
	killFile := dirs[0] + "/cgroup.kill"
	useKillFile := false
	if _, err := os.Stat(killFile); err == nil {
		// cgroup.kill (Linux 5.14+) kills the whole subtree atomically, so
		// nothing can fork its way out.
		if err := os.WriteFile(killFile, []byte("1"), 0); err != nil {
			return fmt.Errorf("systemdtest: %s: %w", killFile, err)
		}
		useKillFile = true
	}
	deadline := time.Now().Add(stopTimeout)
	for {
		pids, err := m.Procs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("systemdtest: processes %v still in %s after %v", pids, m.cgroupRel, stopTimeout)
		}
		if !useKillFile {
			// Fallback: kill what is listed and go round again for anything
			// forked meanwhile.
			for _, pid := range pids {
				p, err := m.openProc(pid)
				if err != nil {
					continue // gone, or not ours after all
				}
				_ = p.signal(unix.SIGKILL)
				p.close()
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// removeCgroups removes the user@U.service cgroup trees depth-first, then the
// user-U.slice and user.slice parents if nothing else uses them.
func (m *Manager) removeCgroups() error {
	for _, dir := range m.CgroupDirs() {
		var dirs []string
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if cgroupGone(err) {
					return nil
				}
				return err
			}
			if d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		if err != nil {
			return err
		}
		// WalkDir visits parents first; remove in reverse.
		for _, d := range slices.Backward(dirs) {
			if err := rmdirRetry(d); err != nil {
				return err
			}
		}
		// The parents may be shared with other uids' managers: best effort.
		parent := filepath.Dir(dir)
		_ = unix.Rmdir(parent)
		_ = unix.Rmdir(filepath.Dir(parent))
	}
	return nil
}

// rmdirRetry retries EBUSY: a cgroup stays busy for a moment after its last
// process exits.
func rmdirRetry(dir string) error {
	deadline := time.Now().Add(stopTimeout)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("systemdtest: rmdir %s: %w", dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Shutdown stops the user manager and removes everything booting it created:
// the manager is asked to exit (SIGTERM, then SIGKILL, as fallbacks), what is
// left in its cgroup is killed, the cgroup directories and /run/user/U are
// removed. It is not an error if no manager is running; leftovers are cleaned
// up all the same. Tests that call it must hold Exclusive.
func (m *Manager) Shutdown() error {
	return underBootLock(func() error {
		if pid, err := m.CurrentPID(); err == nil {
			if err := m.stopManager(pid); err != nil {
				return err
			}
		}
		if err := m.killCgroup(); err != nil {
			return err
		}
		if err := m.removeCgroups(); err != nil {
			return err
		}
		if err := os.RemoveAll(m.runtimeDir); err != nil {
			return fmt.Errorf("systemdtest: %w", err)
		}
		return nil
	})
}

func (m *Manager) stopManager(pid int) error {
	p, err := m.openProc(pid)
	if errors.Is(err, errGone) {
		return nil
	}
	if err != nil {
		return err
	}
	defer p.close()
	if err := m.exitViaBus(); err != nil {
		if err := p.signal(unix.SIGTERM); err != nil {
			return err
		}
	}
	if p.wait(stopTimeout) == nil {
		return nil
	}
	if err := p.signal(unix.SIGKILL); err != nil {
		return err
	}
	return p.wait(stopTimeout)
}

// exitViaBus is `systemctl --user exit`: the manager stops its units in
// order and then exits.
func (m *Manager) exitViaBus() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := godbus.Connect(m.busAddress, godbus.WithContext(ctx))
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Object(managerName, managerPath).CallWithContext(ctx,
		managerIface+".Exit", godbus.FlagNoAutoStart).Err
}
