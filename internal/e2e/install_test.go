package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/enrollment"
	"github.com/commandcore/commandcore/internal/relay/downloads"
)

// scriptEnv is a user with an empty home who installs the agent with a
// relay's install.sh: the unit goes to the user manager's own unit
// directory (XDG_CONFIG_HOME), everything else under the empty home.
type scriptEnv struct {
	t       *testing.T
	relay   *relayEnv
	home    string
	config  string // XDG_CONFIG_HOME
	service string
}

var scriptServices atomic.Int64

func newScriptEnv(t *testing.T, relay *relayEnv) *scriptEnv {
	t.Helper()
	realHome, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptEnv{t: t, relay: relay, home: t.TempDir(), config: filepath.Join(realHome, ".config"),
		service: fmt.Sprintf("cc-e2e-%d-%d", os.Getpid(), scriptServices.Add(1))}
	t.Cleanup(func() {
		// Whatever a failed run left: the unit and the identity.
		cmd := exec.Command(bin, "uninstall", "--purge", "--service", s.service)
		cmd.Env = s.env(os.Getenv("PATH"))
		cmd.Run()
	})
	return s
}

// env is the user's environment with PATH path, and extra.
func (s *scriptEnv) env(path string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "HOME", "PATH", "XDG_CONFIG_HOME", "XDG_STATE_HOME":
		default:
			env = append(env, kv)
		}
	}
	return append(append(env, "HOME="+s.home, "XDG_CONFIG_HOME="+s.config, "PATH="+path), extra...)
}

// pipe runs `FETCH URL/install.sh | SHELL -s -- ARGS` as a person pastes
// it, with PATH path and the environment's extra variables; it returns
// stdout, stderr and the exit code.
func (s *scriptEnv) pipe(fetch, shell, path string, extraEnv []string, args ...string) (string, string, int) {
	s.t.Helper()
	line := fmt.Sprintf("%s %s%s | %s -s -- %s", fetch, s.relay.url, downloads.ScriptPath, shell, strings.Join(args, " "))
	return s.runShell(exec.Command("/bin/sh", "-c", line), path, extraEnv)
}

// feed runs shell on the script the relay serves, as pipe does, with the
// script fetched here (so PATH may lack every fetcher).
func (s *scriptEnv) feed(shell []string, path string, extraEnv []string, args ...string) (string, string, int) {
	s.t.Helper()
	res, err := http.Get(s.relay.url + downloads.ScriptPath)
	if err != nil {
		s.t.Fatal(err)
	}
	script, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		s.t.Fatalf("GET install.sh: %d %v", res.StatusCode, err)
	}
	cmd := exec.Command(shell[0], append(append(shell[1:], "-s", "--"), args...)...)
	cmd.Stdin = bytes.NewReader(script)
	return s.runShell(cmd, path, extraEnv)
}

func (s *scriptEnv) runShell(cmd *exec.Cmd, path string, extraEnv []string) (string, string, int) {
	s.t.Helper()
	cmd.Env = s.env(path, extraEnv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	}
	s.t.Fatal(err)
	return "", "", 0
}

// installed is the agent binary the script puts in place, in a directory
// of its own.
func (s *scriptEnv) installed() string {
	return filepath.Join(s.home, ".local", "lib", "commandcore", "commandcore")
}

// link is where the script links the binary from, to run it by name; an
// older script put the binary itself there.
func (s *scriptEnv) link() string { return filepath.Join(s.home, ".local", "bin", "commandcore") }

// runs checks that the agent's unit runs exe: its ExecStart names it and
// its main process is it.
func (s *scriptEnv) runs(exe string) {
	s.t.Helper()
	p := unitShow(s.t, s.service+".service", "ExecStart", "MainPID")
	if !strings.Contains(p["ExecStart"], "path="+exe+" ;") {
		s.t.Errorf("the unit runs %s, want %s", p["ExecStart"], exe)
	}
	if got, err := os.Readlink("/proc/" + p["MainPID"] + "/exe"); err != nil || got != exe {
		s.t.Errorf("the agent's process runs %q (%v), want %s", got, err, exe)
	}
}

// linked checks the layout the script makes: the binary in a directory of
// its own, which the service runs, and a link to it in ~/.local/bin, alone
// there.
func (s *scriptEnv) linked() {
	s.t.Helper()
	if got, err := os.Readlink(s.link()); err != nil || got != s.installed() {
		s.t.Errorf("%s links to %q (%v), want %s", s.link(), got, err, s.installed())
	}
	for _, dir := range []string{filepath.Dir(s.installed()), filepath.Dir(s.link())} {
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			s.t.Errorf("in %s: %v, want the one", dir, entries)
		}
	}
	s.runs(s.installed())
}

// identityPath is where the service's identity is kept.
func (s *scriptEnv) identityPath() string { return filepath.Join(s.config, s.service, "identity.json") }

func (s *scriptEnv) unitFile() string {
	return filepath.Join(s.config, "systemd", "user", s.service+".service")
}

// deviceID is the device ID in the stored identity.
func (s *scriptEnv) deviceID() string {
	s.t.Helper()
	data, err := os.ReadFile(s.identityPath())
	if err != nil {
		s.t.Fatal(err)
	}
	var id struct {
		DeviceID string `json:"device_id"`
	}
	if err := json.Unmarshal(data, &id); err != nil || id.DeviceID == "" {
		s.t.Fatalf("identity: %v", err)
	}
	return id.DeviceID
}

// healthy checks what a user would: the unit active, the agent running
// and linked by its own status, and the relay listing the device linked.
func (s *scriptEnv) healthy(name string) {
	s.t.Helper()
	s.healthyAt(name, s.installed())
}

// healthyAt is healthy with the agent's binary at exe.
func (s *scriptEnv) healthyAt(name, exe string) {
	s.t.Helper()
	if p := unitShow(s.t, s.service+".service", "ActiveState"); p["ActiveState"] != "active" {
		s.t.Fatalf("unit %s is %s", s.service, p["ActiveState"])
	}
	s.relay.waitDevice(name, 20*time.Second, func(d deviceJSON) bool { return d.Connected })
	cmd := exec.Command(exe, "status", "--json", "--service", s.service)
	cmd.Env = s.env(os.Getenv("PATH"))
	out, err := cmd.Output()
	var st struct {
		Agent      struct{ Running bool }
		Connection struct{ State string }
	}
	if err != nil || json.Unmarshal(out, &st) != nil || !st.Agent.Running || st.Connection.State != "connected" {
		s.t.Fatalf("status: %v\n%s", err, out)
	}
}

// gone checks that nothing of an installation is left.
func (s *scriptEnv) gone() {
	s.t.Helper()
	for _, p := range []string{s.installed(), filepath.Dir(s.installed()), s.link(), s.unitFile(), s.identityPath()} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			s.t.Errorf("%s is left (%v)", p, err)
		}
	}
	if p := unitShow(s.t, s.service+".service", "LoadState"); p["LoadState"] != "not-found" {
		s.t.Errorf("the user manager still has %s: %s", s.service, p["LoadState"])
	}
}

// toolDir is a directory of links to the named programs, found where
// this test finds them, to be a whole PATH.
func toolDir(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			continue
		}
		if err := os.Symlink(p, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// baseTools are what the script uses besides a fetcher and a shell.
var baseTools = []string{"uname", "systemctl", "loginctl", "sha256sum", "mktemp", "rm", "mkdir", "rmdir", "cp", "chmod", "mv", "ln", "grep", "id", "sleep", "cat"}

// busyboxDir is a PATH of busybox's applets, with systemd's own tools
// (no busybox has them): a host whose userland is busybox.
func busyboxDir(t *testing.T) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("busybox is not installed (.ci/run installs it)")
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := toolDir(t, "systemctl", "loginctl")
	for _, n := range strings.Fields(string(list)) {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			continue
		}
		if err := os.Symlink(bb, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// need fails the test when a program the script is run with is missing.
func need(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Fatalf("%s is not installed (.ci/run installs it)", n)
		}
	}
}

// procWatch sweeps /proc over and over while it runs, noting every
// process whose command line holds secret, which any local user could
// read there, and every `commandcore enroll` it saw with secret in its
// environment.
type procWatch struct {
	secret string
	sweeps atomic.Int64
	stop   chan struct{}
	done   chan struct{}

	mu      sync.Mutex
	exposed map[string]string // PID: its command line
	enrolls map[string]bool   // PIDs
}

func watchProc(secret string) *procWatch {
	w := &procWatch{secret: secret, stop: make(chan struct{}), done: make(chan struct{}), exposed: map[string]string{}, enrolls: map[string]bool{}}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			w.sweep()
			w.sweeps.Add(1)
		}
	}()
	return w
}

func (w *procWatch) sweep() {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + pid + "/cmdline")
		if err != nil || len(cmdline) == 0 {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
		enroll := len(args) > 2 && args[1] == "enroll" && slices.Contains(args, "--keep-identity")
		var env []byte
		if enroll {
			env, _ = os.ReadFile("/proc/" + pid + "/environ")
		}
		w.mu.Lock()
		if strings.Contains(string(cmdline), w.secret) {
			w.exposed[pid] = strings.Join(args, " ")
		}
		if enroll && slices.Contains(strings.Split(string(env), "\x00"), downloads.CodeEnv+"="+w.secret) {
			w.enrolls[pid] = true
		}
		w.mu.Unlock()
	}
}

// hold returns once two sweeps have begun and ended after it was called:
// every process alive all along was seen.
func (w *procWatch) hold() {
	n := w.sweeps.Load()
	for deadline := time.Now().Add(10 * time.Second); w.sweeps.Load() < n+2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// end stops the sweeps and returns the command lines that held the secret
// and how many enroll processes had it in their environment.
func (w *procWatch) end() (exposed []string, enrolls int) {
	close(w.stop)
	<-w.done
	for pid, line := range w.exposed {
		exposed = append(exposed, pid+": "+line)
	}
	return exposed, len(w.enrolls)
}

// TestInstallScript is the one line, as the relay prints it and a person
// pastes it, with an empty home: `curl … | COMMANDCORE_ENROLL_CODE=… sh`
// installs, enrolls and starts the agent, which links, and the code is in
// no process's command line while it runs; running it again, under other
// shells and fetchers, upgrades in place and keeps the identity;
// --uninstall --purge takes it all away.
func TestInstallScript(t *testing.T) {
	need(t, "dash", "busybox", "curl", "wget")
	// Devices reach the relay through a proxy that holds each enrollment
	// until /proc has been swept twice, so the enroll process, waiting
	// for its answer, is surely seen.
	var watch atomic.Pointer[procWatch]
	proxy := httptest.NewUnstartedServer(nil)
	public := "http://" + proxy.Listener.Addr().String()
	e := &relayEnv{t: t, relayState: t.TempDir(), agentState: t.TempDir(), agentConfig: t.TempDir()}
	e.relay = e.serve("127.0.0.1:0", "--public-url", public)
	target, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	proxy.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if w := watch.Load(); w != nil && r.URL.Path == enrollment.EnrollPath {
			w.hold()
		}
		forward.ServeHTTP(rw, r)
	})
	proxy.Start()
	t.Cleanup(proxy.Close)
	s := newScriptEnv(t, e)
	path := os.Getenv("PATH")

	code, errOut, rc := run(t, "relay", "enroll-code", "--state-dir", e.relayState)
	code = strings.TrimSpace(code)
	_, line, ok := strings.Cut(strings.TrimSpace(errOut), "once): ")
	if rc != 0 || !ok {
		t.Fatalf("enroll-code: exit %d, %q", rc, errOut)
	}
	// The line runs as printed; the sh it names is dash, which also names
	// this test's unit and device.
	shell := t.TempDir()
	wrapper := fmt.Sprintf("#!/bin/sh\n[ $# -gt 0 ] || set -- -s --\nexec dash \"$@\" --name line-box --service %s\n", s.service)
	if err := os.WriteFile(filepath.Join(shell, "sh"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	w := watchProc(code)
	watch.Store(w)
	// Typed into a shell, as a person does: its own command line holds
	// nothing of it.
	cmd := exec.Command("/bin/sh")
	cmd.Stdin = strings.NewReader(line + "\n")
	out, errOut, rc := s.runShell(cmd, shell+":"+path, nil)
	watch.Store(nil)
	exposed, enrolls := w.end()
	if len(exposed) > 0 {
		t.Errorf("the code was on the command line of %d processes, there for any local user to read:\n%s", len(exposed), strings.Join(exposed, "\n"))
	}
	if enrolls != 1 {
		t.Errorf("%d enroll processes had the code in $%s, want 1", enrolls, downloads.CodeEnv)
	}
	if rc != 0 {
		t.Fatalf("install with %q: exit %d\n%s%s", line, rc, out, errOut)
	}
	for _, want := range []string{"Enrolled as line-box", "installed and started " + s.service + ".service", "installed " + s.installed(),
		"linked " + s.link() + " to it\n", "Agent:       running", "Connection:  connected to " + public, "lingering is "} {
		if !strings.Contains(out, want) {
			t.Errorf("the script's output lacks %q:\n%s", want, out)
		}
	}
	// enroll's hint to start an agent is not for a line that starts one.
	if strings.Contains(out, "otherwise start it") {
		t.Errorf("the script's output tells the person to start the agent it started:\n%s", out)
	}
	s.healthy("line-box")
	s.linked()
	id := s.deviceID()
	served, _ := os.ReadFile(bin)
	if got, _ := os.ReadFile(s.installed()); sha256.Sum256(got) != sha256.Sum256(served) {
		t.Fatal("the installed binary is not the relay's")
	}
	first, _ := os.Stat(s.installed())
	pid := unitShow(t, s.service+".service", "MainPID")["MainPID"]

	// Again, with GNU wget and no curl, without a code: an upgrade in place.
	wgetPath := toolDir(t, append(baseTools, "wget", "dash")...)
	out, errOut, rc = s.pipe("wget -qO-", "dash", wgetPath, nil, "--service", s.service)
	if rc != 0 || !strings.Contains(out, "identity kept") {
		t.Fatalf("again with wget: exit %d\n%s%s", rc, out, errOut)
	}
	if again, _ := os.Stat(s.installed()); os.SameFile(first, again) {
		t.Error("the binary was not replaced")
	}
	if p := unitShow(t, s.service+".service", "MainPID")["MainPID"]; p == pid {
		t.Error("the agent was not restarted on its new binary")
	}
	s.healthy("line-box")
	s.linked()

	// And under busybox alone (its sh, wget and sha256sum), with a fresh
	// code, which the kept identity leaves unused.
	unused := e.relayCmd("enroll-code")
	out, errOut, rc = s.pipe("wget -qO-", "sh", busyboxDir(t), []string{downloads.CodeEnv + "=" + unused}, "--service", s.service)
	if rc != 0 || !strings.Contains(out, "identity kept") {
		t.Fatalf("again under busybox: exit %d\n%s%s", rc, out, errOut)
	}
	s.healthy("line-box")
	if got := s.deviceID(); got != id {
		t.Fatalf("the identity changed from %s to %s", id, got)
	}
	if devs := e.devices(); len(devs) != 1 {
		t.Fatalf("the relay lists %d devices, want the one: %+v", len(devs), devs)
	}

	// An upgrade whose service does not start puts the previous binary
	// back, and the agent runs on it again.
	badScript := &scriptEnv{t: t, relay: brokenRelay(t), home: s.home, config: s.config, service: s.service}
	out, errOut, rc = badScript.pipe("curl -fsSL", "dash", path, nil, "--service", s.service)
	if want := "commandcore install: the service did not start on the new binary: start: job failed; the previous binary is back in place\n"; rc != 1 || out != "" || errOut != want {
		t.Fatalf("a failed upgrade: exit %d, %q, %q; want %q", rc, out, errOut, want)
	}
	if got, _ := os.ReadFile(s.installed()); sha256.Sum256(got) != sha256.Sum256(served) {
		t.Fatal("the previous binary is not back")
	}
	s.healthy("line-box")
	s.linked()

	out, errOut, rc = s.pipe("curl -fsSL", "dash", path, nil, "--uninstall", "--purge", "--service", s.service)
	if rc != 0 || !strings.Contains(out, "removed "+s.installed()+"\n") || !strings.Contains(out, "removed "+s.link()+"\n") ||
		!strings.Contains(out, "removed "+filepath.Dir(s.installed())+"\n") {
		t.Fatalf("--uninstall --purge: exit %d\n%s%s", rc, out, errOut)
	}
	s.gone()
	// The device told the relay it leaves, before its identity went: the
	// relay shows it removed, and the output says where the state stays.
	if !strings.Contains(out, "that device "+id+" leaves; it shows as removed there\n") || !strings.Contains(out, "its jobs' records and activity stay in ") {
		t.Errorf("--uninstall --purge does not say the relay was told, or where the state stays:\n%s", out)
	}
	if devs := e.devices(); len(devs) != 1 || devs[0].ID != id || devs[0].Standing != "removed" {
		t.Errorf("after --uninstall --purge the relay lists %+v, want device %s removed", devs, id)
	}
}

// brokenRelay serves a binary that enrolls (keeping the identity) but
// whose service does not start: its install points the unit at itself,
// stops the service and fails, as an install on a binary that cannot run
// would.
func brokenRelay(t *testing.T) *relayEnv {
	t.Helper()
	broken := t.TempDir()
	fake := []byte(`#!/bin/sh
case $1 in
enroll) echo 'identity kept.'; exit 0 ;;
install) ;;
*) exit 1 ;;
esac
service=commandcore
while [ $# -gt 0 ]; do
	case $1 in --service) service=$2; shift ;; esac
	shift
done
unit=$XDG_CONFIG_HOME/systemd/user/$service.service
if [ -f "$unit" ]; then
	sed "s|^ExecStart=[^ ]*|ExecStart=$0|" "$unit" >"$unit.new" && mv "$unit.new" "$unit"
	systemctl --user daemon-reload && systemctl --user stop "$service.service"
fi >/dev/null 2>&1
echo 'commandcore: start: job failed' >&2
exit 1
`)
	os.WriteFile(filepath.Join(broken, downloads.BinaryName(runtime.GOARCH)), fake, 0o755)
	os.WriteFile(filepath.Join(broken, downloads.SumsName), fmt.Appendf(nil, "%x  %s\n", sha256.Sum256(fake), downloads.BinaryName(runtime.GOARCH)), 0o644)
	bad := &relayEnv{t: t, relayState: t.TempDir()}
	bad.relay = bad.serve("127.0.0.1:0", "--downloads", broken)
	return bad
}

// TestInstallScriptMovesAnOlderInstall: an install that an older script
// made, the binary itself in ~/.local/bin (with an update's rollback copy
// beside it), is moved to the binary's own directory by running the
// script again: the service runs the new binary there, ~/.local/bin holds
// only the link to it, the identity is kept. An upgrade whose service
// does not start on the new binary leaves the older install as it was,
// the service running on it.
func TestInstallScriptMovesAnOlderInstall(t *testing.T) {
	need(t, "dash", "curl")
	e := startRelay(t)
	s := newScriptEnv(t, e)
	path := os.Getenv("PATH")
	bindir := filepath.Dir(s.link())
	out, errOut, rc := s.pipe("curl -fsSL", "dash", path, []string{downloads.CodeEnv + "=" + e.relayCmd("enroll-code")},
		"--name", "old-box", "--service", s.service, "--prefix", bindir)
	if rc != 0 || !strings.Contains(out, "installed "+s.link()+"\n") || strings.Contains(out, "linked ") {
		t.Fatalf("install with --prefix %s: exit %d\n%s%s", bindir, rc, out, errOut)
	}
	served, _ := os.ReadFile(bin)
	if err := os.WriteFile(filepath.Join(bindir, "commandcore.previous"), served, 0o755); err != nil {
		t.Fatal(err)
	}
	// older checks the older layout works: the binary itself in
	// ~/.local/bin, its rollback copy beside it, the service on it, and
	// nothing in ~/.local/lib.
	older := func() {
		t.Helper()
		if fi, err := os.Lstat(s.link()); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%s is not a file: %v", s.link(), err)
		}
		if got, _ := os.ReadFile(s.link()); sha256.Sum256(got) != sha256.Sum256(served) {
			t.Fatalf("%s is not the binary it was", s.link())
		}
		if entries, _ := os.ReadDir(bindir); len(entries) != 2 {
			t.Errorf("in %s: %v, want the binary and commandcore.previous", bindir, entries)
		}
		if _, err := os.Lstat(filepath.Join(s.home, ".local", "lib")); !os.IsNotExist(err) {
			t.Errorf("~/.local/lib is there: %v", err)
		}
		s.runs(s.link())
		s.healthyAt("old-box", s.link())
	}
	older()
	id := s.deviceID()

	bad := &scriptEnv{t: t, relay: brokenRelay(t), home: s.home, config: s.config, service: s.service}
	out, errOut, rc = bad.pipe("curl -fsSL", "dash", path, nil, "--service", s.service)
	if want := "commandcore install: the service did not start on the new binary: start: job failed; the previous binary is back in place\n"; rc != 1 || out != "" || errOut != want {
		t.Fatalf("a failed upgrade: exit %d, %q, %q; want %q", rc, out, errOut, want)
	}
	older()

	out, errOut, rc = s.pipe("curl -fsSL", "dash", path, nil, "--service", s.service)
	if rc != 0 || !strings.Contains(out, "identity kept") || !strings.Contains(out, "installed "+s.installed()+"\n") ||
		!strings.Contains(out, "linked "+s.link()+" to it\n") {
		t.Fatalf("again without --prefix: exit %d\n%s%s", rc, out, errOut)
	}
	s.healthy("old-box")
	s.linked()
	if got, _ := os.ReadFile(s.installed()); sha256.Sum256(got) != sha256.Sum256(served) {
		t.Fatal("the installed binary is not the relay's")
	}
	if got := s.deviceID(); got != id {
		t.Fatalf("the identity changed from %s to %s", id, got)
	}
	if devs := e.devices(); len(devs) != 1 {
		t.Fatalf("the relay lists %d devices, want the one: %+v", len(devs), devs)
	}

	out, errOut, rc = s.pipe("curl -fsSL", "dash", path, nil, "--uninstall", "--purge", "--service", s.service)
	if rc != 0 || !strings.Contains(out, "removed "+s.installed()+"\n") || !strings.Contains(out, "removed "+s.link()+"\n") {
		t.Fatalf("--uninstall --purge: exit %d\n%s%s", rc, out, errOut)
	}
	s.gone()

	// --uninstall without --prefix finds an older install in ~/.local/bin
	// and removes it, its rollback copy with it.
	out, errOut, rc = s.pipe("curl -fsSL", "dash", path, []string{downloads.CodeEnv + "=" + e.relayCmd("enroll-code")},
		"--name", "old-box-2", "--service", s.service, "--prefix", bindir)
	if rc != 0 {
		t.Fatalf("install with --prefix %s: exit %d\n%s%s", bindir, rc, out, errOut)
	}
	if err := os.WriteFile(filepath.Join(bindir, "commandcore.previous"), served, 0o755); err != nil {
		t.Fatal(err)
	}
	out, errOut, rc = s.pipe("curl -fsSL", "dash", path, nil, "--uninstall", "--purge", "--service", s.service)
	if rc != 0 || !strings.Contains(out, "removed "+s.link()+"\n") || !strings.Contains(out, "removed "+filepath.Join(bindir, "commandcore.previous")+"\n") {
		t.Fatalf("--uninstall --purge of an older install: exit %d\n%s%s", rc, out, errOut)
	}
	s.gone()
	if entries, err := os.ReadDir(bindir); err != nil || len(entries) != 0 {
		t.Errorf("in %s: %v %v", bindir, entries, err)
	}
}

// TestInstallScriptRefusals: each thing that stops the script stops it
// with one line saying which, and leaves nothing behind: not the binary,
// not the unit, not an identity, not even the directory the binary would
// have gone to or the link to it; a service that does not start on a
// fresh install included.
func TestInstallScriptRefusals(t *testing.T) {
	need(t, "dash", "busybox", "curl")
	e := startRelay(t)
	path := os.Getenv("PATH")
	// A uname that says this machine is a riscv64.
	shim := t.TempDir()
	if err := os.WriteFile(filepath.Join(shim, "uname"), []byte("#!/bin/sh\ncase $1 in -m) echo riscv64 ;; *) echo Linux ;; esac\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A relay serving a release whose sums do not match its binary.
	release := t.TempDir()
	name := downloads.BinaryName(runtime.GOARCH)
	os.WriteFile(filepath.Join(release, name), []byte("not the binary the sums describe"), 0o755)
	os.WriteFile(filepath.Join(release, downloads.SumsName), fmt.Appendf(nil, "%x  %s\n", sha256.Sum256([]byte("another")), name), 0o644)
	wrong := &relayEnv{t: t, relayState: t.TempDir(), agentState: t.TempDir(), agentConfig: t.TempDir()}
	wrong.relay = wrong.serve("127.0.0.1:0", "--downloads", release)

	for _, c := range []struct {
		name  string
		relay *relayEnv
		shell []string
		path  string
		env   []string
		code  string
		want  string
		// flag gives the code as --code, as older install lines do.
		flag bool
	}{
		{"refused code", e, []string{"dash"}, path, nil, "ccE-AAAAAAAAAAAAAAAAAAAA", "commandcore install: enrollment failed: ", false},
		{"refused code given with --code", e, []string{"dash"}, path, nil, "ccE-AAAAAAAAAAAAAAAAAAAA", "commandcore install: enrollment failed: ", true},
		{"checksum mismatch", wrong, []string{"busybox", "sh"}, busyboxDir(t), nil, "", "commandcore install: checksum mismatch: " + name + " is ", false},
		{"unsupported architecture", e, []string{"dash"}, shim + ":" + path, nil, "", "commandcore install: unsupported architecture riscv64: ", false},
		{"no curl or wget", e, []string{"dash"}, toolDir(t, baseTools...), nil, "", "commandcore install: neither curl nor wget is installed", false},
		{"no systemd user manager", e, []string{"dash"}, path,
			[]string{"XDG_RUNTIME_DIR=/nonexistent", "DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent/bus"}, "", "commandcore install: no systemd user manager answers (systemctl --user); the agent runs as a user service: run this in your own login session, or where there is none, have root run: loginctl enable-linger ", false},
		{"service does not start", brokenRelay(t), []string{"dash"}, path, nil, "",
			"commandcore install: the service did not start: start: job failed; the identity is kept, so running this again retries", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScriptEnv(t, c.relay)
			code := c.code
			if code == "" {
				code = c.relay.relayCmd("enroll-code")
			}
			env, args := append(c.env, downloads.CodeEnv+"="+code), []string{"--service", s.service}
			if c.flag {
				env, args = c.env, append(args, "--code", code)
			}
			out, errOut, rc := s.feed(c.shell, c.path, env, args...)
			if rc != 1 || out != "" || !strings.HasPrefix(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and one line starting %q", rc, out, errOut, c.want)
			}
			if entries, err := os.ReadDir(s.home); err != nil || len(entries) != 0 {
				t.Errorf("the home is not left empty: %v %v", entries, err)
			}
			if _, err := os.Stat(filepath.Join(s.config, s.service)); !os.IsNotExist(err) {
				t.Errorf("a config directory is left: %v", err)
			}
			s.gone()
			if devs := c.relay.devices(); len(devs) != 0 {
				t.Errorf("the relay lists devices: %+v", devs)
			}
		})
	}
}

// runScript runs shell on script as `… | SHELL -s -- ARGS` does, with an
// empty home, PATH path and the environment's extra variables; it returns
// stdout, stderr and the exit code.
func runScript(t *testing.T, script []byte, shell []string, path string, extraEnv []string, args ...string) (string, string, int) {
	t.Helper()
	s := &scriptEnv{t: t, home: t.TempDir(), config: t.TempDir()}
	cmd := exec.Command(shell[0], append(append(shell[1:], "-s", "--"), args...)...)
	cmd.Stdin = bytes.NewReader(script)
	return s.runShell(cmd, path, extraEnv)
}

// stubs is a directory of programs named names that each append their
// name and arguments to the file log as one line and run body.
func stubs(t *testing.T, log, body string, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		stub := "#!/bin/sh\nprintf '%s\\n' \"${0##*/} $*\" >>" + log + "\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(dir, n), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestInstallScriptRefusesPlainHTTPOffLoopback: a script whose relay is
// plain http off loopback stops with one line before it runs anything,
// curl and wget above all; on loopback (localhost, 127.0.0.0/8, [::1])
// plain http goes on.
func TestInstallScriptRefusesPlainHTTPOffLoopback(t *testing.T) {
	need(t, "dash", "busybox")
	dash, _ := exec.LookPath("dash")
	busybox, _ := exec.LookPath("busybox")
	for _, shell := range [][]string{{dash}, {busybox, "sh"}} {
		for _, c := range []struct {
			url     string
			refused bool
		}{
			{"http://192.0.2.1:1", true},
			{"http://relay.example", true},
			{"http://10.0.0.1:8440/cc", true},
			{"http://localhost.example:1", true},
			{"http://127.0.0.1.example:1", true},
			{"http://127.0.0.1.2:1", true},
			{"http://1127.0.0.1:1", true},
			{"http://[::2]:1", true},
			{"http://[::ffff:7f00:1]:1", true},
			{"http://127.0.0.1:1", false},
			{"http://127.3.2.1", false},
			{"http://localhost:1/cc", false},
			{"http://LOCALHOST:1", false},
			{"http://[::1]:1", false},
		} {
			script, err := downloads.Script(c.url)
			if err != nil {
				t.Fatal(err)
			}
			// Every program the script could run is a stub that notes it ran.
			log := filepath.Join(t.TempDir(), "ran")
			path := stubs(t, log, "exit 1", append(baseTools, "curl", "wget", "busybox")...)
			out, errOut, rc := runScript(t, script, shell, path, []string{downloads.CodeEnv + "=ccE-AAAAAAAAAAAAAAAAAAAA"}, "--name", "box")
			ran, _ := os.ReadFile(log)
			refusal := "commandcore install: " + strings.TrimRight(c.url, "/") + " is plain http off loopback, so anyone on the way could change what it serves; serve the relay over https"
			switch {
			case c.refused && (rc != 1 || out != "" || !strings.HasPrefix(errOut, refusal) || strings.Count(errOut, "\n") != 1):
				t.Errorf("%s under %s: exit %d, stdout %q, stderr %q; want exit 1 and one line starting %q", c.url, shell[0], rc, out, errOut, refusal)
			case c.refused && len(ran) > 0:
				t.Errorf("%s under %s: before refusing, the script ran:\n%s", c.url, shell[0], ran)
			case !c.refused && (strings.Contains(errOut, "off loopback") || !strings.Contains(string(ran), "uname")):
				t.Errorf("%s under %s: refused (exit %d, %q), having run %q", c.url, shell[0], rc, errOut, ran)
			}
		}
	}
}

// TestInstallScriptKeepsHTTPS: from an https relay the script fetches over
// https alone. curl is told so for redirects too, GNU wget follows no
// redirect (its --https-only holds only in recursive mode), and a wget
// that can be kept to neither (busybox's) is refused with one line. A
// relay that serves SHA256SUMS over https and redirects the binary to
// plain http gets nothing installed, and the plain server no request.
func TestInstallScriptKeepsHTTPS(t *testing.T) {
	need(t, "dash", "busybox", "curl", "wget")
	dash, _ := exec.LookPath("dash")
	busybox, _ := exec.LookPath("busybox")
	env := []string{downloads.CodeEnv + "=ccE-AAAAAAAAAAAAAAAAAAAA"}

	// What curl and wget are asked, by stubs that record it and fail.
	script, err := downloads.Script("https://relay.example")
	if err != nil {
		t.Fatal(err)
	}
	gnuHelp := `case $1 in --help) echo '       --https-only                only follow secure HTTPS links'; exit 0 ;; esac; exit 8`
	busyboxHelp := `case $1 in --help) echo 'Usage: wget [-cqS] [--spider] [-O FILE] [-o LOGFILE] [--header STR]' >&2; exit 1 ;; esac; exit 1`
	for _, c := range []struct {
		fetcher, body, want, refusal string
	}{
		{"curl", "exit 22", "curl -fsL --proto =https --proto-redir =https -o ", ""},
		{"wget", gnuHelp, "wget -q --https-only --max-redirect=0 -O ", ""},
		{"wget", busyboxHelp, "", "commandcore install: this wget cannot be kept from following a redirect to http (busybox's cannot); install curl, or GNU wget 1.17 or later, and run this again\n"},
	} {
		log := filepath.Join(t.TempDir(), "ran")
		path := stubs(t, log, c.body, c.fetcher) + ":" + toolDir(t, baseTools...)
		out, errOut, rc := runScript(t, script, []string{dash}, path, env, "--name", "box")
		ran, _ := os.ReadFile(log)
		if c.refusal != "" {
			if rc != 1 || out != "" || errOut != c.refusal || strings.Contains(string(ran), "relay.example") {
				t.Errorf("a wget without --https-only: exit %d, %q, %q, having run %q; want %q", rc, out, errOut, ran, c.refusal)
			}
			continue
		}
		if want := "commandcore install: could not download https://relay.example/download/SHA256SUMS\n"; rc != 1 || errOut != want ||
			!strings.Contains(string(ran), c.want) || !strings.HasSuffix(string(ran), " https://relay.example/download/SHA256SUMS\n") {
			t.Errorf("%s: exit %d, %q, having run:\n%s\nwant %q and a run of %q", c.fetcher, rc, errOut, ran, want, c.want)
		}
	}

	// A real relay stand-in over TLS, whose binary redirects to plain http.
	var plainHits, tlsHits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits.Add(1)
		w.Write([]byte("not the binary"))
	}))
	defer plain.Close()
	file := downloads.BinaryName(runtime.GOARCH)
	relay := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tlsHits.Add(1)
		switch r.URL.Path {
		case downloads.FilePrefix + downloads.SumsName:
			fmt.Fprintf(w, "%x  %s\n", sha256.Sum256([]byte("not the binary")), file)
		case downloads.FilePrefix + file:
			http.Redirect(w, r, plain.URL+r.URL.Path, http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer relay.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: relay.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	wgetrc := filepath.Join(t.TempDir(), "wgetrc")
	if err := os.WriteFile(wgetrc, []byte("ca_certificate = "+ca+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script, err = downloads.Script(relay.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		shell []string
		path  string
		env   []string
		want  string
	}{
		{"curl", []string{dash}, toolDir(t, append(baseTools, "curl")...), []string{"CURL_CA_BUNDLE=" + ca},
			"commandcore install: could not download " + relay.URL + downloads.FilePrefix + file + "\n"},
		{"GNU wget", []string{dash}, toolDir(t, append(baseTools, "wget")...), []string{"WGETRC=" + wgetrc},
			"commandcore install: could not download " + relay.URL + downloads.FilePrefix + file + "\n"},
		{"busybox", []string{busybox, "sh"}, busyboxDir(t), nil,
			"commandcore install: this wget cannot be kept from following a redirect to http (busybox's cannot); install curl, or GNU wget 1.17 or later, and run this again\n"},
	} {
		tlsHits.Store(0)
		out, errOut, rc := runScript(t, script, c.shell, c.path, append(c.env, env...), "--name", "box")
		// SHA256SUMS came over TLS (the refusal names the binary, the next
		// download); the binary never came over plain http.
		if rc != 1 || out != "" || errOut != c.want {
			t.Errorf("%s: exit %d, %q, %q; want %q", c.name, rc, out, errOut, c.want)
		}
		if n := plainHits.Load(); n != 0 {
			t.Fatalf("%s: the plain http server got %d requests", c.name, n)
		}
		if c.name == "busybox" && tlsHits.Load() != 0 {
			t.Errorf("busybox: the relay got %d requests before the refusal", tlsHits.Load())
		}
	}
}
