package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
// it, with PATH path; it returns stdout, stderr and the exit code.
func (s *scriptEnv) pipe(fetch, shell, path string, args ...string) (string, string, int) {
	s.t.Helper()
	line := fmt.Sprintf("%s %s%s | %s -s -- %s", fetch, s.relay.url, downloads.ScriptPath, shell, strings.Join(args, " "))
	return s.runShell(exec.Command("/bin/sh", "-c", line), path, nil)
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

// installed is the agent binary the script puts in place.
func (s *scriptEnv) installed() string { return filepath.Join(s.home, ".local", "bin", "commandcore") }

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
	if p := unitShow(s.t, s.service+".service", "ActiveState"); p["ActiveState"] != "active" {
		s.t.Fatalf("unit %s is %s", s.service, p["ActiveState"])
	}
	s.relay.waitDevice(name, 20*time.Second, func(d deviceJSON) bool { return d.Connected })
	cmd := exec.Command(s.installed(), "status", "--json", "--service", s.service)
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
	for _, p := range []string{s.installed(), s.unitFile(), s.identityPath()} {
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
var baseTools = []string{"uname", "systemctl", "loginctl", "sha256sum", "mktemp", "rm", "mkdir", "cp", "chmod", "mv", "grep", "id", "sleep", "cat"}

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

// TestInstallScript is the one line, as a person pastes it, with an empty
// home: `curl … | sh -s -- --code …` installs, enrolls and starts the
// agent, which links; running it again, under other shells and fetchers,
// upgrades in place and keeps the identity; --uninstall --purge takes it
// all away.
func TestInstallScript(t *testing.T) {
	need(t, "dash", "busybox", "curl", "wget")
	e := startRelay(t)
	s := newScriptEnv(t, e)
	code := e.relayCmd("enroll-code")
	path := os.Getenv("PATH")

	out, errOut, rc := s.pipe("curl -fsSL", "dash", path, "--code", code, "--name", "line-box", "--service", s.service)
	if rc != 0 {
		t.Fatalf("install: exit %d\n%s%s", rc, out, errOut)
	}
	for _, want := range []string{"Enrolled as line-box", "installed and started " + s.service + ".service", "installed " + s.installed(),
		"Agent:       running", "Connection:  connected to " + e.url, "lingering is "} {
		if !strings.Contains(out, want) {
			t.Errorf("the script's output lacks %q:\n%s", want, out)
		}
	}
	s.healthy("line-box")
	id := s.deviceID()
	served, _ := os.ReadFile(bin)
	if got, _ := os.ReadFile(s.installed()); sha256.Sum256(got) != sha256.Sum256(served) {
		t.Fatal("the installed binary is not the relay's")
	}
	first, _ := os.Stat(s.installed())
	pid := unitShow(t, s.service+".service", "MainPID")["MainPID"]

	// Again, with GNU wget and no curl, without a code: an upgrade in place.
	wgetPath := toolDir(t, append(baseTools, "wget", "dash")...)
	out, errOut, rc = s.pipe("wget -qO-", "dash", wgetPath, "--service", s.service)
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

	// And under busybox alone (its sh, wget and sha256sum), with a fresh
	// code, which the kept identity leaves unused.
	unused := e.relayCmd("enroll-code")
	out, errOut, rc = s.pipe("wget -qO-", "sh", busyboxDir(t), "--code", unused, "--service", s.service)
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
	broken := t.TempDir()
	fake := []byte("#!/bin/sh\ncase $1 in enroll) echo 'identity kept.'; exit 0 ;; esac\necho 'commandcore: start: job failed' >&2\nexit 1\n")
	os.WriteFile(filepath.Join(broken, downloads.BinaryName(runtime.GOARCH)), fake, 0o755)
	os.WriteFile(filepath.Join(broken, downloads.SumsName), fmt.Appendf(nil, "%x  %s\n", sha256.Sum256(fake), downloads.BinaryName(runtime.GOARCH)), 0o644)
	bad := &relayEnv{t: t, relayState: t.TempDir()}
	bad.relay = bad.serve("127.0.0.1:0", "--downloads", broken)
	badScript := &scriptEnv{t: t, relay: bad, home: s.home, config: s.config, service: s.service}
	out, errOut, rc = badScript.pipe("curl -fsSL", "dash", path, "--service", s.service)
	if want := "commandcore install: the service did not start on the new binary: start: job failed; the previous binary is back in place\n"; rc != 1 || out != "" || errOut != want {
		t.Fatalf("a failed upgrade: exit %d, %q, %q; want %q", rc, out, errOut, want)
	}
	if got, _ := os.ReadFile(s.installed()); sha256.Sum256(got) != sha256.Sum256(served) {
		t.Fatal("the previous binary is not back")
	}
	if entries, _ := os.ReadDir(filepath.Dir(s.installed())); len(entries) != 1 {
		t.Errorf("beside the binary: %v", entries)
	}
	s.healthy("line-box")

	out, errOut, rc = s.pipe("curl -fsSL", "dash", path, "--uninstall", "--purge", "--service", s.service)
	if rc != 0 || !strings.Contains(out, "removed "+s.installed()) {
		t.Fatalf("--uninstall --purge: exit %d\n%s%s", rc, out, errOut)
	}
	s.gone()
}

// TestInstallScriptRefusals: each thing that stops the script stops it
// with one line saying which, and leaves nothing behind: not the binary,
// not the unit, not an identity, not even the directory the binary would
// have gone to.
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
	}{
		{"refused code", e, []string{"dash"}, path, nil, "ccE-AAAAAAAAAAAAAAAAAAAA", "commandcore install: enrollment failed: "},
		{"checksum mismatch", wrong, []string{"busybox", "sh"}, busyboxDir(t), nil, "", "commandcore install: checksum mismatch: " + name + " is "},
		{"unsupported architecture", e, []string{"dash"}, shim + ":" + path, nil, "", "commandcore install: unsupported architecture riscv64: "},
		{"no curl or wget", e, []string{"dash"}, toolDir(t, baseTools...), nil, "", "commandcore install: neither curl nor wget is installed"},
		{"no systemd user manager", e, []string{"dash"}, path,
			[]string{"XDG_RUNTIME_DIR=/nonexistent", "DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent/bus"}, "", "commandcore install: no systemd user manager answers"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScriptEnv(t, c.relay)
			code := c.code
			if code == "" {
				code = c.relay.relayCmd("enroll-code")
			}
			out, errOut, rc := s.feed(c.shell, c.path, c.env, "--code", code, "--service", s.service)
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
