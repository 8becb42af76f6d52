package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/isolation"
	"github.com/commandcore/commandcore/internal/testkit"
)

// binaryStatus is what `status --json` says of the agent's binary and of
// the cut.
type binaryStatus struct {
	Agent struct {
		Running bool `json:"running"`
	} `json:"agent"`
	Systemd struct {
		AgentDirsHidden bool `json:"agent_dirs_hidden"`
		CanCutJobs      bool `json:"can_cut_jobs"`
		CanCutRun       bool `json:"can_cut_run"`
		AgentBinary     *struct {
			Dir                string `json:"dir"`
			Writable           bool   `json:"writable"`
			Shared             bool   `json:"shared"`
			ReadOnlyInJobUnits bool   `json:"read_only_in_job_units"`
			ReadOnlyInRun      bool   `json:"read_only_in_run"`
		} `json:"agent_binary"`
	} `json:"systemd"`
}

func (e *relayEnv) binaryStatus(t *testing.T) (binaryStatus, string) {
	t.Helper()
	out, _, _ := run(t, "status", "--json", "--state-dir", e.agentState, "--config-dir", e.agentConfig)
	var st binaryStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || !st.Agent.Running || st.Systemd.AgentBinary == nil {
		t.Fatalf("status --json says nothing of the agent's binary: %v\n%s", err, out)
	}
	human, _, _ := run(t, "status", "--state-dir", e.agentState, "--config-dir", e.agentConfig)
	return st, human
}

// installedLayout puts a copy of the binary under test where the one-line
// install puts the agent, home/.local/bin/commandcore, with the
// commandcore.previous an update keeps beside it, and returns the home
// directory, the binary and both files. An agent of its own runs from it,
// so the tests never touch the binary the others run.
func installedLayout(t *testing.T) (home, exe string, files []string) {
	t.Helper()
	home = t.TempDir()
	dir := filepath.Join(home, ".local", "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe = filepath.Join(dir, "commandcore")
	files = []string{exe, exe + ".previous"}
	for _, f := range files {
		in, err := os.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(out, in)
		in.Close()
		if cerr := out.Close(); err != nil || cerr != nil {
			t.Fatal(err, cerr)
		}
	}
	return home, exe, files
}

// homeEnv gives the agent home as its home directory, where the user
// manager's configuration a cut keeps read-only is found.
func homeEnv(home string) []string {
	return []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "XDG_DATA_HOME=" + filepath.Join(home, ".local", "share")}
}

// sums are the files' SHA-256 sums.
func sums(t *testing.T, files []string) []string {
	t.Helper()
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		s := sha256.Sum256(b)
		out = append(out, hex.EncodeToString(s[:]))
	}
	return out
}

// entries are the names in each of dirs.
func entries(t *testing.T, dirs []string) []string {
	t.Helper()
	var out []string
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		for _, e := range ents {
			out = append(out, filepath.Join(d, e.Name()))
		}
	}
	return out
}

// tamperScript tries, from work, every way of changing each of files
// (overwrite, append, copy and mv -f over it, ln -f over it, rename it,
// rm, chmod) and each of dirs (create a file and a directory in it,
// rename it and its parent), printing a line "CHANGED: …" on stdout for
// each that worked, then "elsewhere" once it wrote a file in work.
func tamperScript(work string, files, dirs []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cd %q && printf evil > evil; ", work)
	for _, f := range files {
		fmt.Fprintf(&b, `f=%q; printf evil > "$f" && echo "CHANGED: overwrote $f"; printf evil >> "$f" && echo "CHANGED: appended to $f"; `+
			`cp evil evil2 && mv -f evil2 "$f" && echo "CHANGED: mv -f over $f"; ln -f evil "$f" && echo "CHANGED: ln -f over $f"; `+
			`mv -f "$f" "$f.moved" && echo "CHANGED: renamed $f"; rm -f "$f" && echo "CHANGED: removed $f"; `+
			`chmod 777 "$f" && echo "CHANGED: chmod $f"; `, f)
	}
	for _, d := range dirs {
		fmt.Fprintf(&b, `d=%q; true > "$d/new" && echo "CHANGED: created a file in $d"; mkdir "$d/new.d" && echo "CHANGED: made a directory in $d"; `+
			`mv "$d" "$d.moved" && echo "CHANGED: renamed $d"; mv "${d%%/*}" "${d%%/*}.moved" && echo "CHANGED: renamed the parent of $d"; `, d)
	}
	b.WriteString("echo mine > mine && echo elsewhere")
	return b.String()
}

// isolation is what the relay recorded of how the linked agent keeps its
// jobs from it, as relay devices --json shows it (and the Device page),
// once the link's agent has been noted.
func (e *relayEnv) isolation(t *testing.T) isolation.Report {
	t.Helper()
	var rep isolation.Report
	testkit.Eventually(t, 10*time.Second, func() error {
		var d struct {
			AgentVersion string           `json:"agent_version"`
			Isolation    isolation.Report `json:"isolation"`
		}
		out := e.relayCmd("devices", "--json")
		if err := json.Unmarshal([]byte(out), &d); err != nil || d.AgentVersion == "" {
			return fmt.Errorf("the link's agent is not noted yet: %v %s", err, out)
		}
		rep = d.Isolation
		return nil
	})
	return rep
}

// TestJobsCannotReplaceTheAgentsBinary, through the relay with a token
// allowed only process.* tools: status says the directory of the agent's
// binary (installed as the one-line install does, in ~/.local/bin, with
// commandcore.previous beside it) is read-only in job units and
// process.run commands, and it is: a job and a command write their own
// files, but every write to either binary (overwrite, mv -f over, ln -f
// over, rename, rm, chmod), every new entry beside them, and every rename
// of the directory or its parent fails; the binaries' SHA-256 sums and the
// directory's entries are what they were, and the agent restarts from it.
func TestJobsCannotReplaceTheAgentsBinary(t *testing.T) {
	home, exe, files := installedLayout(t)
	dir := filepath.Dir(exe)
	e := startRelay(t)
	e.agentExe, e.agentEnv = exe, homeEnv(home)
	e.enrollAgent("dev1")
	token, _ := e.newToken("dev1", "process.*")
	c, err := e.connect("/mcp/dev1", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitOnline(t, c, nil)
	st, human := e.binaryStatus(t)
	b := st.Systemd.AgentBinary
	if b.Dir != dir || !b.Writable || b.Shared {
		t.Fatalf("status of the agent's binary: %+v", b)
	}
	before, listed := sums(t, files), entries(t, []string{dir, filepath.Dir(dir)})
	work := t.TempDir()
	script := tamperScript(work, files, []string{dir})
	said := e.isolation(t)
	if !b.ReadOnlyInJobUnits || !b.ReadOnlyInRun {
		if said.AgentBinary == isolation.BinaryReadOnly {
			t.Fatalf("the relay was told the agent's binary is read-only to jobs where it is not: %+v", said)
		}
		if st.Systemd.AgentDirsHidden || !strings.Contains(human, "agent's binary in "+dir+" CAN be replaced") {
			t.Fatalf("status says jobs can replace the agent's binary where they need not:\n%s", human)
		}
		t.Skip("this host cannot make a directory read-only to jobs: shown that status says so, not the cover itself")
	}
	if want := "agent's binary directory " + dir + " read-only in job units and process.run commands, against direct writes only\n"; !strings.Contains(human, want) {
		t.Fatalf("human status lacks %q:\n%s", want, human)
	}
	if want := (isolation.Report{AgentBinary: isolation.BinaryReadOnly, UserManager: isolation.ManagerReachable}); said != want {
		t.Fatalf("the relay's device page would say %+v, want %+v", said, want)
	}
	if out := jobOutput(t, c, script); out != "elsewhere\n" {
		t.Errorf("a job changed the agent's binary:\n%s", out)
	}
	if out := runOutput(t, c, script); out != "elsewhere\n" {
		t.Errorf("a process.run command changed the agent's binary:\n%s", out)
	}
	if after := sums(t, files); !slices.Equal(after, before) {
		t.Fatalf("SHA-256 of %q: %q, before %q", files, after, before)
	}
	if after := entries(t, []string{dir, filepath.Dir(dir)}); !slices.Equal(after, listed) {
		t.Fatalf("entries %q, before %q", after, listed)
	}
	if b, err := os.ReadFile(filepath.Join(work, "mine")); err != nil || string(b) != "mine\n" {
		t.Fatalf("the job's own file: %q %v", b, err)
	}
	// The next start runs the agent's own binary.
	e.agent.Process.Signal(syscall.SIGKILL)
	e.agent.Wait()
	e.startAgent()
	waitOnline(t, c, nil)
}

// TestCutOffJobsCannotWriteTheUserManagersUnits, through the relay with a
// token allowed only process.* tools: where the owner's permissions.json
// says "jobs_reach_user_manager": false, a job and a process.run command
// see the user manager's unit directory (its unit files and drop-ins), its
// other configuration and the agent's binary read-only: every write,
// rename, removal and mode change fails, nothing new appears there, and
// every file's SHA-256 is what it was. Lifting the cut gives the next job
// the unit directory back.
func TestCutOffJobsCannotWriteTheUserManagersUnits(t *testing.T) {
	home, exe, binaries := installedLayout(t)
	config, data := filepath.Join(home, ".config"), filepath.Join(home, ".local", "share")
	units := filepath.Join(config, "systemd", "user")
	dropIns := filepath.Join(units, "commandcore.service.d")
	for _, d := range []string{dropIns, filepath.Join(config, "environment.d"), filepath.Join(data, "systemd")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	unitFile, dropIn := filepath.Join(units, "commandcore.service"), filepath.Join(dropIns, "override.conf")
	for f, content := range map[string]string{unitFile: "[Service]\nExecStart=" + exe + " agent\n", dropIn: "[Service]\nEnvironment=A=1\n"} {
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := startRelay(t)
	e.agentExe, e.agentEnv = exe, homeEnv(home)
	ceiling := filepath.Join(e.agentConfig, "permissions.json")
	if err := os.WriteFile(ceiling, []byte(`{"schema_version": 1, "tools": ["*"], "jobs_reach_user_manager": false}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e.enrollAgent("dev1")
	token, _ := e.newToken("dev1", "process.*")
	c, err := e.connect("/mcp/dev1", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitOnline(t, c, nil)
	st, human := e.binaryStatus(t)
	said := e.isolation(t)
	if !st.Systemd.CanCutJobs || !st.Systemd.CanCutRun {
		if said.UserManager == isolation.ManagerCutOff {
			t.Fatalf("the relay was told jobs are cut off where this host cannot: %+v", said)
		}
		if code, msg := c.fail("process.start", map[string]any{"command": "true"}); code != "permission_denied" || !strings.Contains(msg, "which this host cannot do") {
			t.Fatalf("status says this host cannot cut jobs off, but a job: %s %q", code, msg)
		}
		t.Skip("this host cannot cut jobs off: shown that status says so and jobs are refused, not the cut itself")
	}
	if !strings.Contains(human, "(jobs_reach_user_manager false), which see its unit files and configuration read-only") {
		t.Fatalf("human status does not say the cut keeps the manager's configuration read-only:\n%s", human)
	}
	if said.UserManager != isolation.ManagerCutOff {
		t.Fatalf("the relay's device page would say %+v, want the user manager cut off", said)
	}
	files := append([]string{unitFile, dropIn}, binaries...)
	dirs := []string{units, dropIns, filepath.Join(config, "systemd"), filepath.Join(config, "environment.d"), filepath.Join(data, "systemd"), filepath.Dir(exe)}
	before, listed := sums(t, files), entries(t, dirs)
	work := t.TempDir()
	// The real runtime directory's units are tried by name only: renaming
	// the directory there would take it from the manager every test runs
	// on, were the cover missing.
	runtime := os.Getenv("XDG_RUNTIME_DIR")
	tag := make([]byte, 6)
	rand.Read(tag)
	runtimeUnit := filepath.Join(runtime, "systemd", "user", "commandcore-e2e-"+hex.EncodeToString(tag)+".service")
	if _, err := os.Stat(filepath.Dir(runtimeUnit)); err != nil {
		t.Cleanup(func() { os.Remove(filepath.Dir(runtimeUnit)) })
	}
	t.Cleanup(func() { os.Remove(runtimeUnit) })
	script := fmt.Sprintf(`mkdir -p %q && true > %q && echo "CHANGED: wrote %s"; `, filepath.Dir(runtimeUnit), runtimeUnit, runtimeUnit) +
		fmt.Sprintf(`printf 'LD_PRELOAD=%s/evil.so\n' > %q && echo "CHANGED: wrote environment.d"; `, work, filepath.Join(config, "environment.d", "evil.conf")) +
		tamperScript(work, files, dirs)
	if out := jobOutput(t, c, script); out != "elsewhere\n" {
		t.Errorf("a cut-off job changed what the user manager runs later:\n%s", out)
	}
	if out := runOutput(t, c, script); out != "elsewhere\n" {
		t.Errorf("a cut-off process.run command changed what the user manager runs later:\n%s", out)
	}
	if after := sums(t, files); !slices.Equal(after, before) {
		t.Fatalf("SHA-256 of %q: %q, before %q", files, after, before)
	}
	if after := entries(t, dirs); !slices.Equal(after, listed) {
		t.Fatalf("entries %q, before %q", after, listed)
	}
	if _, err := os.Lstat(runtimeUnit); err == nil {
		t.Fatalf("%s was written", runtimeUnit)
	}
	// Without the cut the next job writes the unit directory, as
	// systemctl --user edit does.
	if err := os.WriteFile(ceiling, []byte(`{"schema_version": 1, "tools": ["*"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := jobOutput(t, c, fmt.Sprintf("true > %q && echo wrote", filepath.Join(units, "new.service"))); out != "wrote\n" {
		t.Fatalf("a job that reaches the user manager could not write its unit directory: %q", out)
	}
}
