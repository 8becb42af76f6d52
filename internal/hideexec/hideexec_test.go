package hideexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/commandcore/commandcore/internal/roles"
	"github.com/commandcore/commandcore/internal/testkit"
)

// The test binary doubles as the role, as a client that connects to a
// unix socket (`EXE connect PATH`, printing what happened) and, with
// asUserEnv set, as an agent of an ordinary user that probes and runs one
// command.
const asUserEnv = "HIDEEXEC_TEST_AS_USER"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == roles.HideExec {
		os.Exit(Main(os.Args[2:], os.Stderr))
	}
	if len(os.Args) == 3 && os.Args[1] == "connect" {
		if c, err := net.Dial("unix", os.Args[2]); err != nil {
			fmt.Println("not connected:", errors.Unwrap(errors.Unwrap(err)))
		} else {
			fmt.Println("connected")
			c.Close()
		}
		os.Exit(0)
	}
	if spec := os.Getenv(asUserEnv); spec != "" {
		os.Exit(runAsAgent(spec))
	}
	os.Exit(m.Run())
}

// runAsAgent probes and runs a shell command through the role as an agent
// would; spec is STATE\nCONFIG\nCWD\nSOCKET\nREADONLY\nCOMMAND: a SOCKET,
// when not empty, is the user manager's socket the command is cut off
// from, and a READONLY a directory it sees read-only. It prints "userns"
// when the role got a user namespace, then the command's output.
func runAsAgent(spec string) int {
	f := strings.SplitN(spec, "\n", 6)
	var c Covers
	if f[3] != "" {
		c.Sockets = []string{f[3]}
	}
	if f[4] != "" {
		c.ReadOnly = []string{f[4]}
	}
	exe, _ := os.Executable()
	h := Probe(context.Background(), exe, f[0], f[1], c)
	if h == nil {
		fmt.Println("probe failed")
		return 1
	}
	if h.userns {
		fmt.Println("userns")
	}
	// Held open, as the agent holds its journal.
	held, err := os.Open(filepath.Join(f[1], "identity.json"))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer held.Close()
	cmd := exec.Command("/bin/sh", "-c", f[5])
	cmd.Dir = f[2]
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	h.Wrap(cmd, "", c.Sockets != nil)
	cmd.Run()
	return 0
}

// agentDirs makes a state and a config directory, each with a secret.
func agentDirs(t *testing.T, root string) (state, config string) {
	t.Helper()
	state, config = filepath.Join(root, "state"), filepath.Join(root, "config")
	for _, d := range []string{filepath.Join(state, "jobs", "other"), config} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(state, "jobs", "other", "stdout.cap"), filepath.Join(config, "identity.json")} {
		if err := os.WriteFile(f, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return state, config
}

func probe(t *testing.T, state, config string, sockets ...string) *Hider {
	t.Helper()
	return probeCovers(t, state, config, Covers{Sockets: sockets})
}

func probeCovers(t *testing.T, state, config string, c Covers) *Hider {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := Probe(context.Background(), exe, state, config, c)
	if h == nil {
		if os.Geteuid() == 0 {
			t.Fatal("the probe failed for root, who can always make a mount namespace")
		}
		t.Skip("this host refuses user namespaces")
	}
	return h
}

// run runs a shell script through h with bind and returns its combined
// output, its exit status and the PID the caller started.
func run(t *testing.T, h *Hider, dir, bind, script string) (string, int, int) {
	t.Helper()
	return runCut(t, h, dir, bind, false, script)
}

// runCut is run, cut off from the user manager when cut.
func runCut(t *testing.T, h *Hider, dir, bind string, cut bool, script string) (string, int, int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	h.Wrap(cmd, bind, cut)
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code, cmd.Process.Pid
}

// TestProgramSeesNeitherDirectory: a command started through the role
// reads neither the identity nor a job's output, and fails saying so; it
// is the process the caller started (same PID, its own process group), and
// what it writes outside the agent's directories is really written.
func TestProgramSeesNeitherDirectory(t *testing.T) {
	state, config := agentDirs(t, t.TempDir())
	h := probe(t, state, config)
	work := t.TempDir()
	script := fmt.Sprintf(`echo $$ $(cut -d' ' -f5 /proc/$$/stat) > pid; echo written > out; cat %q; ls %q`,
		filepath.Join(config, "identity.json"), filepath.Join(state, "jobs"))
	out, code, pid := run(t, h, work, "", script)
	if strings.Contains(out, "secret") || code == 0 {
		t.Fatalf("the command read the agent's files (exit %d): %q", code, out)
	}
	if !strings.Contains(out, "No such file") {
		t.Errorf("the command's failure does not say the files are not there: %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(work, "out")); err != nil || string(b) != "written\n" {
		t.Fatalf("a file written in the working directory: %q %v", b, err)
	}
	b, _ := os.ReadFile(filepath.Join(work, "pid"))
	if want := fmt.Sprintf("%d %d\n", pid, pid); string(b) != want {
		t.Fatalf("the shell's PID and process group: %q, want %q", b, want)
	}
	// Outside, nothing changed.
	if b, err := os.ReadFile(filepath.Join(config, "identity.json")); err != nil || string(b) != "secret\n" {
		t.Fatalf("the identity outside: %q %v", b, err)
	}
}

// TestBoundDirectoryStaysWritable: a directory bound back in (a job's own,
// for a supervisor) is reached and written, while the rest of the state
// directory stays out of sight and the cover is read-only.
func TestBoundDirectoryStaysWritable(t *testing.T) {
	state, config := agentDirs(t, t.TempDir())
	h := probe(t, state, config)
	own := filepath.Join(state, "jobs", "mine")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`echo mine > %q/stdout.cap && cat %q/stdout.cap; ls %q; : > %q/new && echo cover-writable`,
		own, own, filepath.Join(state, "jobs"), state)
	out, _, _ := run(t, h, "/", own, script)
	if !strings.HasPrefix(out, "mine\nmine\n") || strings.Contains(out, "other") || strings.Contains(out, "cover-writable") {
		t.Fatalf("inside: %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(own, "stdout.cap")); err != nil || string(b) != "mine\n" {
		t.Fatalf("the bound directory's file outside: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(state, "new")); err == nil {
		t.Fatal("a file written to the cover reached the state directory")
	}
}

// TestEnvironmentReachesTheProgramAsGiven: the program gets its
// environment exactly, also the variables the Go runtime would read at the
// role's start (a malformed GOMEMLIMIT would stop it), and a variable
// named like one set aside; the role's own GOMAXPROCS does not reach it.
func TestEnvironmentReachesTheProgramAsGiven(t *testing.T) {
	state, config := agentDirs(t, t.TempDir())
	h := probe(t, state, config)
	for _, env := range [][]string{
		{"GOMEMLIMIT=garbage", "GODEBUG=inittrace=1", "GOMAXPROCS=x", aside + "GOGC=y", "PLAIN=v=w"},
		{"PLAIN=v=w"},
	} {
		cmd := exec.Command("/usr/bin/env")
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		h.Wrap(cmd, "", false)
		if err := cmd.Run(); err != nil || stderr.Len() != 0 {
			t.Fatalf("%v: %s", err, stderr.Bytes())
		}
		if got := strings.Fields(stdout.String()); strings.Join(got, " ") != strings.Join(env, " ") {
			t.Fatalf("the program's environment: %q, want %q", got, env)
		}
	}
}

// TestWorkingDirectoryInsideIsRefused: a command whose working directory
// lies inside a hidden directory does not run there (an open directory
// would lead past the cover) and says why.
func TestWorkingDirectoryInsideIsRefused(t *testing.T) {
	state, config := agentDirs(t, t.TempDir())
	h := probe(t, state, config)
	out, code, _ := run(t, h, filepath.Join(state, "jobs", "other"), "", "cat stdout.cap")
	if code != ExitFailure || strings.Contains(out, "secret") || !strings.Contains(out, "working directory is inside the agent's own directories") {
		t.Fatalf("exit %d: %q", code, out)
	}
}

// TestOrdinaryUserGetsAUserNamespace: for an agent without CAP_SYS_ADMIN
// (here uid 65534, started by this root test) the role runs in a user
// namespace of its own; the command sees neither directory, nor reaches
// them through the agent's /proc entries (its root, its open files),
// cannot unmount the cover, not even as root of a user namespace of its
// own, and cannot gain privileges (no_new_privs).
func TestOrdinaryUserGetsAUserNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process as another user")
	}
	const nobody = 65534
	testkit.SkipWithoutUserNamespaces(t, nobody)
	root := t.TempDir()
	// Everything the other user must reach: the binary and the directories.
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, _ := os.Executable()
	bin := filepath.Join(root, "hideexec.test")
	copyFile(t, exe, bin)
	state, config := agentDirs(t, root)
	work := filepath.Join(root, "work")
	os.Mkdir(work, 0o700)
	for _, p := range []string{state, filepath.Join(state, "jobs"), filepath.Join(state, "jobs", "other"), filepath.Join(state, "jobs", "other", "stdout.cap"), config, filepath.Join(config, "identity.json"), work} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	script := fmt.Sprintf(`cat %[1]q/identity.json; umount %[2]q && echo unmounted; `+
		`unshare -Urm sh -c 'umount %[2]q && cat %[2]q/jobs/other/stdout.cap'; `+
		`cat /proc/$PPID/root%[1]s/identity.json /proc/$PPID/fd/*; `+
		`grep NoNewPrivs /proc/self/status; id -u; echo written > out`, config, state)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), asUserEnv+"="+state+"\n"+config+"\n"+work+"\n\n\n"+script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil || !strings.HasPrefix(out, "userns\n") {
		t.Fatalf("as an ordinary user: %v: %q", err, out)
	}
	if strings.Contains(out, "secret") || strings.Contains(out, "unmounted") {
		t.Fatalf("the command reached the agent's files: %q", out)
	}
	if !strings.Contains(out, "NoNewPrivs:\t1\n") || !strings.Contains(out, "\n65534\n") {
		t.Fatalf("the command's privileges: %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(work, "out")); err != nil || string(b) != "written\n" {
		t.Fatalf("a file written in the working directory: %q %v", b, err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestProbeWhereUserNamespacesAreRefused simulates a host whose sysctl or
// LSM refuses the namespaces (the role cannot be started): the probe says
// no Hider, so callers start their programs as before, and it leaves
// nothing behind.
func TestProbeWhereUserNamespacesAreRefused(t *testing.T) {
	startProbe = func(*exec.Cmd) error { return &os.SyscallError{Syscall: "clone", Err: syscall.EPERM} }
	t.Cleanup(func() { startProbe = (*exec.Cmd).Run })
	state, config := t.TempDir(), t.TempDir()
	if h := Probe(context.Background(), "/nonexistent", state, config, Covers{}); h != nil {
		t.Fatal("a refused probe returned a Hider")
	}
	assertEmpty(t, state, config)
}

// TestProbeLeavesNothingBehind: a successful probe removes its markers.
func TestProbeLeavesNothingBehind(t *testing.T) {
	state, config := t.TempDir(), t.TempDir()
	probe(t, state, config)
	assertEmpty(t, state, config)
}

func assertEmpty(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("%s holds %v after the probe", d, ents)
		}
	}
}

// listen serves a unix socket at path that anyone may connect to, as the
// user bus is (srw-rw-rw-).
func listen(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// connected counts the "connected" lines of the connect helper's output.
func connected(out string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if line == "connected" {
			n++
		}
	}
	return n
}

// TestCutOffCommandReachesNoSocket: a command cut off from the user
// manager cannot connect to its socket, which one that is not cut off
// does; a socket that is not there is skipped, not created, and the
// socket outside keeps working.
func TestCutOffCommandReachesNoSocket(t *testing.T) {
	state, config := agentDirs(t, t.TempDir())
	dir := t.TempDir()
	sock, missing := filepath.Join(dir, "bus"), filepath.Join(dir, "private")
	listen(t, sock)
	h := probe(t, state, config, sock, missing)
	exe, _ := os.Executable()
	script := fmt.Sprintf(`%q connect %q`, exe, sock)
	out, code, _ := runCut(t, h, "/", "", true, script)
	if code != 0 || connected(out) != 0 || !strings.Contains(out, "not connected: connection refused") {
		t.Fatalf("a cut-off command and the socket (exit %d): %q", code, out)
	}
	if out, _, _ := runCut(t, h, "/", "", false, script); connected(out) != 1 {
		t.Fatalf("a command that is not cut off and the socket: %q", out)
	}
	if _, err := os.Lstat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the missing socket's path after the cut: %v", err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("the socket outside: %v", err)
	}
	c.Close()
}

// TestOrdinaryUsersCutOffCommandReachesNoSocket: for an agent of an
// ordinary user (uid 65534, started by this root test), a cut-off command
// reaches the socket neither at its path, nor through the /proc/PID/root
// of the agent, which still sees it, nor by unmounting the cover, not even
// from a user namespace of its own; the same command not cut off connects.
func TestOrdinaryUsersCutOffCommandReachesNoSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process as another user")
	}
	const nobody = 65534
	testkit.SkipWithoutUserNamespaces(t, nobody)
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, _ := os.Executable()
	bin := filepath.Join(root, "hideexec.test")
	copyFile(t, exe, bin)
	state, config := agentDirs(t, root)
	sock := filepath.Join(root, "bus")
	listen(t, sock)
	for _, p := range []string{state, config, filepath.Join(config, "identity.json")} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	asNobody := func(socket, script string) string {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), asUserEnv+"="+state+"\n"+config+"\n/\n"+socket+"\n\n"+script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		b, err := cmd.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(b), "userns\n") {
			t.Fatalf("as an ordinary user: %v: %q", err, b)
		}
		return string(b)
	}
	script := fmt.Sprintf(`%[1]q connect %[2]q; %[1]q connect /proc/$PPID/root%[2]s; umount %[2]q && echo unmounted; `+
		`unshare -Urm sh -c 'umount %[2]q && echo unmounted; %[1]q connect %[2]q'`, bin, sock)
	out := asNobody(sock, script)
	if connected(out) != 0 || strings.Contains(out, "unmounted") || !strings.Contains(out, "not connected: connection refused") ||
		!strings.Contains(out, "not connected: permission denied") {
		t.Fatalf("an ordinary user's cut-off command and the socket: %q", out)
	}
	if out := asNobody("", fmt.Sprintf(`%q connect %q`, bin, sock)); connected(out) != 1 {
		t.Fatalf("an ordinary user's command that is not cut off and the socket: %q", out)
	}
}
