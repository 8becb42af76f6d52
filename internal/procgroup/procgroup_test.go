package procgroup

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/testkit"
)

// startGroup starts sh -c script as the leader of a new process group. The
// script prints the PIDs of its members on its first line once they run.
func startGroup(t *testing.T, script string) (*exec.Cmd, []int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	line := make([]byte, 256)
	n, _ := out.Read(line)
	var pids []int
	for _, f := range strings.Fields(string(line[:n])) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("member line %q", line[:n])
		}
		pids = append(pids, pid)
	}
	return cmd, pids
}

// alive reports whether pid runs (exists and is not a zombie).
func alive(pid int) bool {
	_, zombie, err := procid.Default().Lookup(pid)
	return err == nil && !zombie
}

// awaitGone fails the test unless pid is gone within 5 s.
func awaitGone(t *testing.T, pid int, what string) {
	t.Helper()
	if err := testkit.Poll(5*time.Second, func() error {
		if alive(pid) {
			return fmt.Errorf("member %d %s", pid, what)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

func group(t *testing.T, cmd *exec.Cmd) *Group {
	t.Helper()
	g, err := Of(procid.Default(), cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if g.Leader().PID != cmd.Process.Pid || g.Leader().StartTicks == 0 {
		t.Fatalf("leader %+v", g.Leader())
	}
	return g
}

// TestStopEndsTheGroupWithSIGTERM: a group that obeys SIGTERM is ended by
// it, every member, and Wait returns once it is empty, well before the
// SIGKILL deadline, without a SIGKILL.
func TestStopEndsTheGroupWithSIGTERM(t *testing.T) {
	cmd, pids := startGroup(t, `sleep 60 & a=$!; sleep 60 & echo $a $!; wait`)
	g := group(t, cmd)
	began := time.Now()
	const grace = 10 * time.Second
	s := g.Stop(grace)
	AwaitExit(cmd.Process.Pid)
	s.Wait()
	if d := time.Since(began); d >= grace {
		t.Errorf("Wait took %v: it waited for the deadline", d)
	}
	select {
	case <-s.Killed():
		t.Error("SIGKILL was sent to a group that obeyed SIGTERM")
	default:
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("member %d survived SIGTERM", pid)
		}
	}
	cmd.Wait()
	if st := cmd.ProcessState.Sys().(syscall.WaitStatus); !st.Signaled() || st.Signal() != syscall.SIGTERM {
		t.Errorf("leader ended %v, want by SIGTERM", cmd.ProcessState)
	}
}

// TestStopKillsMembersIgnoringSIGTERM: a member that ignores SIGTERM
// outlives its leader until the deadline, then SIGKILL ends it.
func TestStopKillsMembersIgnoringSIGTERM(t *testing.T) {
	cmd, pids := startGroup(t, `(trap '' TERM; echo $(sh -c 'echo $PPID'); exec sleep 60) `)
	g := group(t, cmd)
	const grace = 300 * time.Millisecond
	began := time.Now()
	s := g.Stop(grace)
	AwaitExit(cmd.Process.Pid)
	s.Wait()
	if d := time.Since(began); d < grace {
		t.Errorf("Wait returned after %v, before the %v deadline", d, grace)
	}
	select {
	case <-s.Killed():
	default:
		t.Error("Killed is not closed after the deadline")
	}
	awaitGone(t, pids[0], "ignoring SIGTERM survived the SIGKILL deadline")
}

// TestKillBeforeTheDeadline: Kill sends SIGKILL at once, and no SIGKILL
// follows at the deadline (the stop has ended).
func TestKillBeforeTheDeadline(t *testing.T) {
	cmd, _ := startGroup(t, `trap '' TERM; echo; while :; do sleep 1; done`)
	g := group(t, cmd)
	s := g.Stop(time.Hour)
	s.Kill()
	<-s.Killed()
	AwaitExit(cmd.Process.Pid)
	cmd.Wait()
	if st := cmd.ProcessState.Sys().(syscall.WaitStatus); !st.Signaled() || st.Signal() != syscall.SIGKILL {
		t.Errorf("leader ended %v, want by SIGKILL", cmd.ProcessState)
	}
}

// TestSignalSparesAReusedPID simulates a leader PID the kernel handed to
// another process: a group whose recorded start ticks differ is not
// signalled.
func TestSignalSparesAReusedPID(t *testing.T) {
	cmd, _ := startGroup(t, `echo; exec sleep 60`)
	g := group(t, cmd)
	other := &Group{procs: g.procs, leader: procid.Identity{PID: g.leader.PID, StartTicks: g.leader.StartTicks + 1}}
	other.Signal(syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond)
	if !alive(cmd.Process.Pid) {
		t.Fatal("a process with the leader's PID but another start time was signalled")
	}
}

// TestNilGroupIsSignalledNothing: a group whose leader could not be
// identified is never signalled, and a stop of it still ends.
func TestNilGroupIsSignalledNothing(t *testing.T) {
	var g *Group
	g.Signal(syscall.SIGKILL)
	s := g.Stop(50 * time.Millisecond)
	<-s.Killed()
	s.Wait()
	s.Kill()
}

// TestLifelineKillsTheGroupWhenItsStarterIsGone: the lifeline's pipe
// closing without a release (its starter's end) kills the whole group.
func TestLifelineKillsTheGroupWhenItsStarterIsGone(t *testing.T) {
	cmd, pids := startGroup(t, `sleep 60 & echo $!; wait`)
	l, err := StartLifeline("/bin/sh", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	l.w.Close()
	AwaitExit(cmd.Process.Pid)
	l.proc.Wait()
	cmd.Wait()
	if st := cmd.ProcessState.Sys().(syscall.WaitStatus); !st.Signaled() || st.Signal() != syscall.SIGKILL {
		t.Errorf("leader ended %v, want by SIGKILL", cmd.ProcessState)
	}
	awaitGone(t, pids[0], "outlived the lifeline")
}

// TestLifelineReleased: a released lifeline exits and kills nothing.
func TestLifelineReleased(t *testing.T) {
	cmd, _ := startGroup(t, `echo; exec sleep 60`)
	l, err := StartLifeline("/bin/sh", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	time.Sleep(100 * time.Millisecond)
	if !alive(cmd.Process.Pid) {
		t.Fatal("a released lifeline killed its group")
	}
}
