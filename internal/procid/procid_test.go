package procid

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/testkit"
)

func startSleep(t *testing.T, attr *syscall.SysProcAttr) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func TestSelfAndBootID(t *testing.T) {
	s := Default()
	self, err := s.Self()
	if err != nil || self.StartTicks == 0 {
		t.Fatalf("self: %+v %v", self, err)
	}
	if alive, err := s.Alive(self); !alive || err != nil {
		t.Fatalf("this process is not alive to itself: %v", err)
	}
	boot, err := s.BootID()
	if err != nil || len(boot) != 36 {
		t.Fatalf("boot id %q: %v", boot, err)
	}
}

func TestSignalChecksIdentity(t *testing.T) {
	s := Default()
	cmd := startSleep(t, nil)
	id, _, err := s.Lookup(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// Another incarnation of the same PID is never signalled.
	stale := Identity{PID: id.PID, StartTicks: id.StartTicks - 1}
	if err := s.Signal(stale, unix.SIGKILL); !errors.Is(err, ErrMismatch) {
		t.Fatalf("signal to a mismatched identity: %v", err)
	}
	if alive, _ := s.Alive(id); !alive {
		t.Fatal("the process was signalled despite the mismatch")
	}
	if err := s.Signal(id, unix.SIGKILL); err != nil {
		t.Fatalf("signal to the right identity: %v", err)
	}
	cmd.Wait()
	if err := s.Signal(id, unix.SIGKILL); !errors.Is(err, ErrGone) {
		t.Fatalf("signal to a reaped process: %v", err)
	}
	if alive, _ := s.Alive(id); alive {
		t.Fatal("a reaped process is alive")
	}
}

func TestGroupSurvivors(t *testing.T) {
	s := Default()
	leader := startSleep(t, &syscall.SysProcAttr{Setpgid: true})
	lid, _, _ := s.Lookup(leader.Process.Pid)
	member := startSleep(t, &syscall.SysProcAttr{Setpgid: true, Pgid: leader.Process.Pid})
	mid, _, _ := s.Lookup(member.Process.Pid)
	got, err := s.GroupSurvivors(lid)
	if err != nil || len(got) != 2 {
		t.Fatalf("survivors %+v %v, want the leader and the member", got, err)
	}
	// A recorded leader whose PID now belongs to another incarnation means
	// the group is not ours, though it has members.
	if got, _ := s.GroupSurvivors(Identity{PID: lid.PID, StartTicks: lid.StartTicks - 1}); len(got) != 0 {
		t.Fatalf("a reused leader PID yielded survivors %+v", got)
	}
	// The leader gone, its group lives on in the member.
	leader.Process.Kill()
	leader.Wait()
	testkit.Eventually(t, 5*time.Second, func() error {
		if got, _ = s.GroupSurvivors(lid); len(got) != 1 {
			return fmt.Errorf("after the leader died: %+v, want only %+v", got, mid)
		}
		return nil
	})
	if len(got) != 1 || got[0] != mid {
		t.Fatalf("after the leader died: %+v, want only %+v", got, mid)
	}
}

func TestParseStat(t *testing.T) {
	// A command name may hold spaces and parentheses: the fields after it
	// start at its last ')'. Fields from the kernel's format (proc(5)).
	line := "4242 (a) b (c)) S 1 4240 4240 0 -1 4194304 101 0 0 0 0 0 0 0 20 0 1 0 2750746 3133440 394 18446744073709551615 0 0\n"
	st, err := parseStat([]byte(line))
	if err != nil || st != (procStat{state: 'S', pgrp: 4240, startTicks: 2750746}) {
		t.Fatalf("parseStat = %+v, %v", st, err)
	}
	// At the bounds: a name that is all of the fields before the state
	// (its ')' first), and exactly the fields up to the start time.
	if st, err := parseStat([]byte(") R 1 7 7 0 -1 4194304 101 0 0 0 0 0 0 0 20 0 1 0 55")); err != nil || st != (procStat{state: 'R', pgrp: 7, startTicks: 55}) {
		t.Fatalf("parseStat at the bounds = %+v, %v", st, err)
	}
	for _, bad := range []string{
		"",
		"4242 (sleep S 1 4240", // no end of the name
		"4242 (sleep) S 1 4240 4240 0 -1 4194304 101 0",                                    // cut before the start time
		"4242 (sleep) S 1 x 4240 0 -1 4194304 101 0 0 0 0 0 0 0 20 0 1 0 2750746 3133440",  // process group not a number
		"4242 (sleep) S 1 4240 4240 0 -1 4194304 101 0 0 0 0 0 0 0 20 0 1 0 -3 3133440",    // negative start
		"4242 (sleep) SS 1 4240 4240 0 -1 4194304 101 0 0 0 0 0 0 0 20 0 1 0 2750746 3133", // state not one letter
	} {
		if st, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) = %+v, want an error", bad, st)
		}
	}
}

func TestLookupReadsTheKernelsStat(t *testing.T) {
	cmd := startSleep(t, &syscall.SysProcAttr{Setpgid: true})
	id, zombie, err := Default().Lookup(cmd.Process.Pid)
	if err != nil || zombie {
		t.Fatalf("lookup of a live sleep: %+v zombie=%v %v", id, zombie, err)
	}
	survivors, err := Default().GroupSurvivors(id)
	if err != nil || len(survivors) != 1 || survivors[0] != id {
		t.Fatalf("GroupSurvivors = %+v, %v; want just %+v", survivors, err, id)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, _, err := Default().Lookup(id.PID); !errors.Is(err, ErrGone) {
		t.Fatalf("lookup after the process was reaped: %v", err)
	}
}

// FuzzParseStat: any line parses or errs without panicking, and a line
// the kernel could write (any command name) gives back its fields.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12 0 0"), "sleep", uint32(77), uint64(123456))
	f.Add([]byte(""), "a) (b", uint32(0), uint64(0))
	f.Fuzz(func(t *testing.T, junk []byte, comm string, pgrp uint32, start uint64) {
		parseStat(junk)
		comm = strings.NewReplacer("\n", "", "\x00", "").Replace(comm)
		line := fmt.Sprintf("9 (%s) R 1 %d 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0 0\n", comm, int32(pgrp), start)
		st, err := parseStat([]byte(line))
		if err != nil || st != (procStat{state: 'R', pgrp: int(int32(pgrp)), startTicks: start}) {
			t.Fatalf("parseStat(%q) = %+v, %v", line, st, err)
		}
	})
}

// TestPinTellsWhenItsProcessExits: a pinned process has not exited while
// it runs, has once it is a zombie (killed, not yet reaped) and still has
// once reaped; pinning checks the identity as Signal does.
func TestPinTellsWhenItsProcessExits(t *testing.T) {
	s := Default()
	cmd := startSleep(t, nil)
	id, _, err := s.Lookup(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pin(Identity{PID: id.PID, StartTicks: id.StartTicks + 1}); !errors.Is(err, ErrMismatch) {
		t.Fatalf("pin of another incarnation: %v", err)
	}
	p, err := s.Pin(id)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if exited, err := p.Exited(); exited || err != nil {
		t.Fatalf("a running process exited: %v, %v", exited, err)
	}
	if err := p.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(5*time.Second, func() error {
		if _, zombie, err := s.Lookup(id.PID); err != nil || !zombie {
			return fmt.Errorf("not yet a zombie (%v)", err)
		}
		return nil
	})
	if exited, err := p.Exited(); !exited || err != nil {
		t.Fatalf("a zombie has not exited: %v, %v", exited, err)
	}
	if _, err := s.Pin(id); !errors.Is(err, ErrGone) {
		t.Fatalf("pin of a zombie: %v", err)
	}
	cmd.Wait()
	if exited, err := p.Exited(); !exited || err != nil {
		t.Fatalf("a reaped process has not exited: %v, %v", exited, err)
	}
	if err := p.Signal(unix.SIGKILL); !errors.Is(err, ErrGone) {
		t.Fatalf("signal to a reaped process: %v", err)
	}
	if _, err := s.Pin(id); !errors.Is(err, ErrGone) && !errors.Is(err, ErrMismatch) {
		t.Fatalf("pin of a reaped process: %v", err)
	}
	p.Close()
	if _, err := p.Exited(); err == nil {
		t.Fatal("a closed pin answered")
	}
}

// TestSourceNeedsADirectory: a proc root that is missing or a file is
// refused; an unset PID is a process that is gone.
func TestSourceNeedsADirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{filepath.Join(dir, "missing"), file} {
		if _, err := NewSource(root); err == nil {
			t.Errorf("NewSource(%s) took it", root)
		}
	}
	for _, pid := range []int{0, -1} {
		if _, _, err := Default().Lookup(pid); !errors.Is(err, ErrGone) {
			t.Errorf("Lookup(%d) = %v, want gone", pid, err)
		}
	}
}

// TestAliveChecksTheIncarnation: a running process under another start
// time is not alive.
func TestAliveChecksTheIncarnation(t *testing.T) {
	s := Default()
	cmd := startSleep(t, nil)
	id, _, err := s.Lookup(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if alive, err := s.Alive(id); !alive || err != nil {
		t.Fatalf("the process itself: %v, %v", alive, err)
	}
	if alive, err := s.Alive(Identity{PID: id.PID, StartTicks: id.StartTicks + 1}); alive || err != nil {
		t.Fatalf("another incarnation of its PID: %v, %v", alive, err)
	}
}

// TestGroupSurvivorsReadsEveryEntry: over a proc tree of its own, the
// members of the group are found whatever sorts before them (a name that
// is no PID, a process of the group that started before its leader, a
// zombie of the group) and nothing else is.
func TestGroupSurvivorsReadsEveryEntry(t *testing.T) {
	root := t.TempDir()
	stat := func(pid int, state byte, pgrp int, start uint64) {
		t.Helper()
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("%d (sh) %c 1 %d %d 0 -1 4194304 101 0 0 0 0 0 0 0 20 0 1 0 %d 3133440 394\n", pid, state, pgrp, pgrp, start)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "-self"), 0o700); err != nil {
		t.Fatal(err)
	}
	stat(200, 'S', 200, 1000) // the leader
	stat(201, 'Z', 200, 1001) // a zombie of the group
	stat(202, 'S', 200, 999)  // in the group, started before the leader: another's
	stat(203, 'S', 300, 1002) // another group
	stat(204, 'S', 200, 1003) // a member
	s, err := NewSource(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GroupSurvivors(Identity{PID: 200, StartTicks: 1000})
	want := []Identity{{PID: 200, StartTicks: 1000}, {PID: 204, StartTicks: 1003}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("GroupSurvivors = %+v, %v; want %+v", got, err, want)
	}
}
