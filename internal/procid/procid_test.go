package procid

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ = s.GroupSurvivors(lid)
		if len(got) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(got) != 1 || got[0] != mid {
		t.Fatalf("after the leader died: %+v, want only %+v", got, mid)
	}
}
