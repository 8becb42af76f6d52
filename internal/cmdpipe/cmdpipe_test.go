package cmdpipe

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/testkit"
)

// shells are the shells jobs use: bash and the POSIX shell (dash here).
func shells(t *testing.T) []string {
	var out []string
	for _, sh := range []string{"/bin/bash", "/bin/dash", "/bin/sh"} {
		if _, err := os.Stat(sh); err == nil {
			out = append(out, sh)
		}
	}
	if len(out) == 0 {
		t.Skip("no shell")
	}
	return out
}

type result struct {
	stdout, stderr string
	status         syscall.WaitStatus
}

// start starts shell on command with stdin, and returns the shell process,
// the pipe's inode and a function that waits for the result.
func start(t *testing.T, shell, command, stdin string) (*os.Process, uint64, func() result) {
	t.Helper()
	dir := t.TempDir()
	in, err := os.Create(filepath.Join(dir, "in"))
	if err != nil {
		t.Fatal(err)
	}
	in.WriteString(stdin)
	in.Seek(0, 0)
	defer in.Close()
	out, _ := os.Create(filepath.Join(dir, "out"))
	defer out.Close()
	errf, _ := os.Create(filepath.Join(dir, "err"))
	defer errf.Close()
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(p.Reader().Fd()), &st); err != nil {
		t.Fatal(err)
	}
	proc, err := os.StartProcess(shell, Argv(shell), &os.ProcAttr{
		Env:   []string{"PATH=/usr/bin:/bin"},
		Files: []*os.File{in, out, errf, p.Reader()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		p.Close()
		t.Fatal(err)
	}
	p.Send(command)
	return proc, st.Ino, func() result {
		t.Helper()
		ps, err := proc.Wait()
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		o, _ := os.ReadFile(out.Name())
		e, _ := os.ReadFile(errf.Name())
		return result{string(o), string(e), ps.Sys().(syscall.WaitStatus)}
	}
}

func run(t *testing.T, shell, command, stdin string) result {
	t.Helper()
	_, _, wait := start(t, shell, command, stdin)
	return wait()
}

func TestCommandsRunAsWithDashC(t *testing.T) {
	for _, sh := range shells(t) {
		t.Run(filepath.Base(sh), func(t *testing.T) {
			for _, c := range []struct{ name, command, stdin, stdout string }{
				{"quotes and expansions", `a='it'"'"'s'; echo "$a" '$HOME' "\$x" \\`, "", "it's $HOME $x \\\n"},
				{"multi-line without trailing newline", "echo one\necho two\nprintf three", "", "one\ntwo\nthree"},
				{"trailing newlines kept", "cat <<'E'\nx\n\n\nE\n\n\n", "", "x\n\n\n"},
				{"here-document at the end without newline", "cat <<E\nbody\nE", "", "body\n"},
				{"non-UTF-8 bytes", "printf '%s' '\xff\xfe'", "", "\xff\xfe"},
				{"reads its stdin", "read a; cat; echo \"[$a]\"", "first\nrest\n", "rest\n[first]\n"},
				{"$0 is the shell, no arguments", `echo "$0 $#"`, "", sh + " 0\n"},
				{"the variable is gone", `echo "${__commandcore_command-unset}"; env | grep -c commandcore || :`, "", "unset\n0\n"},
				{"descriptor 3 is closed", `( : <&3 ) 2>/dev/null && echo open || echo closed`, "", "closed\n"},
			} {
				r := run(t, sh, c.command, c.stdin)
				if r.stdout != c.stdout || r.status.ExitStatus() != 0 {
					t.Errorf("%s: stdout %q (stderr %q, status %v), want %q", c.name, r.stdout, r.stderr, r.status, c.stdout)
				}
			}
		})
	}
}

func TestErrorsNameTheCommandsLine(t *testing.T) {
	for _, sh := range shells(t) {
		r := run(t, sh, "true\nno-such-command-4d1e", "")
		// bash: "/bin/bash: line 2: ...", dash: "/bin/sh: 2: eval: ...".
		if !strings.HasPrefix(r.stderr, sh+": ") || !strings.Contains(r.stderr, "2: ") || r.status.ExitStatus() != 127 {
			t.Errorf("%s: stderr %q status %v", sh, r.stderr, r.status)
		}
	}
}

func TestExitStatusAndSignal(t *testing.T) {
	for _, sh := range shells(t) {
		if r := run(t, sh, "exit 7", ""); !r.status.Exited() || r.status.ExitStatus() != 7 {
			t.Errorf("%s: exit 7 ended %v", sh, r.status)
		}
		if r := run(t, sh, "false", ""); r.status.ExitStatus() != 1 {
			t.Errorf("%s: false ended %v", sh, r.status)
		}
		if r := run(t, sh, "kill -TERM $$", ""); !r.status.Signaled() || r.status.Signal() != syscall.SIGTERM {
			t.Errorf("%s: kill -TERM $$ ended %v", sh, r.status)
		}
		if r := run(t, sh, "syntax error (", ""); r.status.ExitStatus() != 2 || r.stderr == "" {
			t.Errorf("%s: a syntax error ended %v, stderr %q", sh, r.status, r.stderr)
		}
	}
}

// TestLargeCommand: a command far larger than a pipe buffer arrives whole.
func TestLargeCommand(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 4<<20; i++ {
		fmt.Fprintf(&b, "x=%d # it's line %d of a long command\n", i, i)
	}
	b.WriteString(`echo "$x"`)
	for _, sh := range shells(t) {
		r := run(t, sh, b.String(), "")
		if want := strconv.Itoa(strings.Count(b.String(), "\n")-1) + "\n"; r.stdout != want {
			t.Errorf("%s: stdout %q, want %q (stderr %.200q)", sh, r.stdout, want, r.stderr)
		}
	}
}

// TestNoProcessCarriesTheCommand: while the command runs, neither the shell
// nor a subshell nor a program it started has the command in its argv or
// environment, or the pipe among its descriptors.
func TestNoProcessCarriesTheCommand(t *testing.T) {
	const marker = "MARKER-5be0c1a9"
	for _, sh := range shells(t) {
		t.Run(filepath.Base(sh), func(t *testing.T) {
			proc, ino, wait := start(t, sh, "m="+marker+"; (sleep 30; :) & sleep 30 & echo ready; wait", "")
			defer func() { syscall.Kill(-proc.Pid, syscall.SIGKILL); wait() }()
			members := awaitGroup(t, proc.Pid, 4)
			pipe := fmt.Sprintf("pipe:[%d]", ino)
			for _, pid := range members {
				for _, f := range []string{"cmdline", "environ"} {
					data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
					if err != nil {
						t.Fatal(err)
					}
					if bytes.Contains(data, []byte(marker)) {
						t.Errorf("process %d's %s has the command: %q", pid, f, data)
					}
				}
				fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
				for _, fd := range fds {
					if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); l == pipe {
						t.Errorf("process %d holds the command pipe as descriptor %s", pid, fd.Name())
					}
				}
			}
		})
	}
}

// awaitGroup waits until process group pgid has n members and returns them.
func awaitGroup(t *testing.T, pgid, n int) []int {
	t.Helper()
	var members []int
	testkit.Eventually(t, 10*time.Second, func() error {
		members = nil
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
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

// TestCloseEndsABlockedWrite: a shell that never reads (stopped here) does
// not leave the writer blocked once the pipe is closed.
func TestCloseEndsABlockedWrite(t *testing.T) {
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	keep, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", p.Reader().Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	p.Send(strings.Repeat("x", 1<<20))
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a write nobody reads")
	}
}
