package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/testkit"
)

// jobCommand keeps a shell, a subshell and two programs running, with marker
// only in the command's text (an assignment, never an argument), and writes
// the shell's PID (its process group) to pidFile.
func jobCommand(marker string) string {
	return `m=` + marker + `; (sleep 60; :) & echo $$ > "$PIDFILE"; sleep 60; :`
}

// TestCommandsStayOffTheArgv: /proc/<pid>/cmdline is readable by every
// local user, so no process of a job, managed or foreground, shows the
// command there, to its owner or to another user (nobody).
func TestCommandsStayOffTheArgv(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	t.Run("managed job", func(t *testing.T) {
		marker := "MARKER-job-6e01d7c2"
		pidFile := filepath.Join(t.TempDir(), "pid")
		res := c.start(map[string]any{"command": jobCommand(marker), "env": map[string]string{"PIDFILE": pidFile}})
		t.Cleanup(func() { c.stopAndWait(res.ProcessID) })
		if res.FailureDomain != "systemd_unit" {
			t.Fatalf("job not in a transient unit: %+v", res)
		}
		checkArgv(t, marker, groupMembers(t, readPID(t, pidFile), 4))
	})
	t.Run("process.run", func(t *testing.T) {
		marker := "MARKER-run-93b4a0f5"
		pidFile := filepath.Join(t.TempDir(), "pid")
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			res, _ := c.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{
				"command": jobCommand(marker), "env": map[string]string{"PIDFILE": pidFile}, "timeout_ms": 60000,
			}})
			done <- res
		}()
		pgid := readPID(t, pidFile)
		checkArgv(t, marker, groupMembers(t, pgid, 4))
		syscall.Kill(-pgid, syscall.SIGKILL)
		res := <-done
		var out struct{ Signal string }
		if raw, _ := json.Marshal(res.StructuredContent); res.IsError || json.Unmarshal(raw, &out) != nil || out.Signal != "SIGKILL" {
			t.Fatalf("process.run ended %+v", res)
		}
	})
}

// checkArgv asserts that no process's argv carries marker, as this test's
// user and as nobody read them, and that both could read the members'.
func checkArgv(t *testing.T, marker string, members []int) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	own := map[int]string{}
	for _, e := range entries {
		if pid := atoi(e.Name()); pid > 0 {
			b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			own[pid] = string(b)
		}
	}
	check(t, "read by the job's user", marker, members, own)
	check(t, "read by nobody", marker, members, cmdlinesAsNobody(t))
}

func check(t *testing.T, who, marker string, members []int, cmdlines map[int]string) {
	t.Helper()
	for pid, argv := range cmdlines {
		if strings.Contains(argv, marker) {
			t.Errorf("%s: process %d carries the command: %q", who, pid, argv)
		}
	}
	for _, pid := range members {
		if strings.TrimSpace(cmdlines[pid]) == "" {
			t.Errorf("%s: the job's process %d shows no argv; the check above proves nothing", who, pid)
		}
	}
}

// cmdlinesAsNobody reads every process's argv as user nobody.
func cmdlinesAsNobody(t *testing.T) map[int]string {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil || os.Geteuid() != 0 {
		t.Skipf("cannot read as another user (nobody: %v; euid %d)", err, os.Geteuid())
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cmd := exec.Command("/bin/sh", "-c", `for p in /proc/[0-9]*; do printf '%s\t' "${p#/proc/}"; tr '\0' ' ' < "$p/cmdline"; echo; done 2>/dev/null`)
	cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("read argv as nobody: %v", err)
	}
	m := map[int]string{}
	for _, line := range bytes.Split(out, []byte("\n")) {
		if pid, argv, ok := strings.Cut(string(line), "\t"); ok {
			m[atoi(pid)] = argv
		}
	}
	return m
}

// readPID waits for a job to write its shell's PID to file.
func readPID(t *testing.T, file string) int {
	t.Helper()
	var pid int
	testkit.Eventually(t, 10*time.Second, func() error {
		b, _ := os.ReadFile(file)
		if pid = atoi(strings.TrimSpace(string(b))); !strings.HasSuffix(string(b), "\n") || pid <= 0 {
			return fmt.Errorf("the job never wrote its PID: %s holds %q", file, b)
		}
		return nil
	})
	return pid
}

// groupMembers waits until process group pgid has n live members.
func groupMembers(t *testing.T, pgid, n int) []int {
	t.Helper()
	var members []int
	testkit.Eventually(t, 10*time.Second, func() error {
		members = nil
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid := atoi(e.Name())
			if g, err := syscall.Getpgid(pid); pid > 0 && err == nil && g == pgid && processExists(pid) {
				members = append(members, pid)
			}
		}
		if len(members) < n {
			return fmt.Errorf("process group %d has %d members, want %d", pgid, len(members), n)
		}
		return nil
	})
	return members
}
