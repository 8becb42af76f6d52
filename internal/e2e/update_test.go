package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/testkit"
)

// buildVersion builds this tree as version v.
func buildVersion(t *testing.T, v string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "commandcore")
	if err := testkit.Build(out, testkit.Main, []string{"-ldflags", "-X github.com/commandcore/commandcore/internal/version.Version=" + v}); err != nil {
		t.Fatal(err)
	}
	return out
}

// releaseOf is a release directory as make release lays it out, holding
// binary as this machine's architecture's, stated as version.
func releaseOf(t *testing.T, version string, binary []byte) string {
	t.Helper()
	dir := t.TempDir()
	name := "commandcore-linux-" + runtime.GOARCH
	if err := os.WriteFile(filepath.Join(dir, name), binary, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "VERSION"), []byte(version+"\n"), 0o644)
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	sums := sum(binary) + "  " + name + "\n" + sum([]byte(version+"\n")) + "  VERSION\n"
	os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(sums), 0o644)
	return dir
}

// runBin runs exe with args, as run runs the binary under test.
func runBin(t *testing.T, exe string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(exe, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s %v: %v", exe, args, err)
	}
	return out.String(), errb.String(), 0
}

// updateView is what the test reads of status --json.
type updateView struct {
	Agent struct {
		Running bool   `json:"running"`
		Version string `json:"version"`
	} `json:"agent"`
	Connection struct {
		State string `json:"state"`
	} `json:"connection"`
	Update *struct {
		Offered string `json:"offered"`
		Last    *struct {
			From, To, State string
		} `json:"last"`
	} `json:"update"`
}

// TestAgentUpdate: an installed agent of one version, linked to a relay
// that serves a build of this tree with another version, is shown as
// outdated (relay devices, status); commandcore update installs the
// offered binary through the user manager while a job runs, the job ends
// with its honest result after it and the agent reports the new version.
// A "new" binary that exits at once is rolled back by the watchdog: the
// device is on the previous version and linked within 75 s, and status
// and the journal say so. A downgrade is refused without the flag.
func TestAgentUpdate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries and waits out a rollback (about 100 s)")
	}
	older, newer := buildVersion(t, "1.0.0"), buildVersion(t, "1.1.0")
	installed := filepath.Join(t.TempDir(), "commandcore")
	data, err := os.ReadFile(older)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(installed, data, 0o755)
	newBytes, _ := os.ReadFile(newer)

	e := &relayEnv{t: t, relayState: t.TempDir(), agentState: t.TempDir(), agentConfig: t.TempDir()}
	e.relay = e.serve("127.0.0.1:0", "--downloads", releaseOf(t, "1.1.0", newBytes))
	listen := strings.TrimPrefix(e.url, "http://")
	// restartRelay serves another release on the same address, where the
	// agent links.
	restartRelay := func(release string, extra ...string) {
		e.relay.Process.Signal(syscall.SIGTERM)
		e.relay.Wait()
		testkit.Eventually(t, 10*time.Second, func() error {
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			return ln.Close()
		})
		e.relay = e.serve(listen, append([]string{"--downloads", release}, extra...)...)
	}

	service := fmt.Sprintf("cc-e2e-update-%d.service", os.Getpid())
	dirs := []string{"--service", service, "--state-dir", e.agentState, "--config-dir", e.agentConfig}
	code := e.relayCmd("enroll-code", "--name", "upd")
	if _, errOut, rc := runBin(t, installed, append([]string{"enroll", "--server", e.url, "--code", code}, dirs...)...); rc != 0 {
		t.Fatalf("enroll: %s", errOut)
	}
	if _, errOut, rc := runBin(t, installed, append([]string{"install"}, dirs...)...); rc != 0 {
		t.Fatalf("install: %s", errOut)
	}
	t.Cleanup(func() { runBin(t, installed, append([]string{"uninstall"}, dirs...)...) })

	status := func() updateView {
		t.Helper()
		out, _, _ := runBin(t, installed, append([]string{"status", "--json"}, dirs...)...)
		var v updateView
		json.Unmarshal([]byte(out), &v)
		return v
	}
	device := func() (version, offer string) {
		t.Helper()
		var d struct {
			Connected    bool   `json:"connected"`
			AgentVersion string `json:"agent_version"`
			UpdateOffer  string `json:"update_offer"`
		}
		json.Unmarshal([]byte(e.relayCmd("devices", "--json")), &d)
		if !d.Connected {
			return "", ""
		}
		return d.AgentVersion, d.UpdateOffer
	}
	linkedAs := func(version, offer string, within time.Duration) {
		t.Helper()
		testkit.Eventually(t, within, func() error {
			v, o := device()
			st := status()
			if v != version || o != offer || st.Agent.Version != version || st.Connection.State != "connected" {
				return fmt.Errorf("relay devices: %q offered %q; status: %+v", v, o, st)
			}
			if offer != "" && (st.Update == nil || st.Update.Offered != offer) {
				return fmt.Errorf("status does not show the offer of %s: %+v", offer, st.Update)
			}
			return nil
		})
	}
	linkedAs("1.0.0", "1.1.0", 40*time.Second)
	if out := e.relayCmd("devices"); !strings.Contains(out, "1.0.0 (outdated: 1.1.0 offered)") {
		t.Errorf("relay devices does not call the agent outdated:\n%s", out)
	}

	// A job started before the update keeps its supervisor across it.
	token, _ := e.newToken("upd", "*")
	c, err := e.connect("/mcp/upd", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitOnline(t, c, nil)
	job := c.start(map[string]any{"command": "sleep 20; echo done"})

	began := time.Now()
	out, errOut, rc := runBin(t, installed, append([]string{"update"}, dirs...)...)
	if rc != 0 || !strings.Contains(out, "updated: agent 1.1.0 linked") {
		t.Fatalf("update: exit %d\n%s%s", rc, out, errOut)
	}
	t.Logf("update: %s from the command to the new agent linked", time.Since(began).Round(time.Millisecond))
	logSteps(t, installed, dirs, began)
	linkedAs("1.1.0", "", 20*time.Second)
	if got, _ := os.ReadFile(installed); string(got) != string(newBytes) {
		t.Error("the installed binary is not the one offered")
	}
	if got, _ := os.ReadFile(installed + ".previous"); string(got) != string(data) {
		t.Error("the previous binary is not kept")
	}
	if st := status(); st.Update == nil || st.Update.Last == nil || st.Update.Last.State != "done" || st.Update.Last.To != "1.1.0" {
		t.Errorf("status after the update: %+v", st.Update)
	}
	waitOnline(t, c, nil)
	r := c.waitTerminal(job.ProcessID, 40*time.Second)
	if r.State != "exited" || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("the job that ran across the update ended %s (exit %v)", r.State, r.ExitCode)
	}
	if got := c.readAll(job.ProcessID, 1<<16).data[0]; string(got) != "done\n" {
		t.Errorf("the job's output is %q", got)
	}

	// A "new" binary that exits at once: the previous one comes back.
	restartRelay(releaseOf(t, "1.2.0", []byte("#!/bin/sh\nexit 1\n")))
	linkedAs("1.1.0", "1.2.0", 40*time.Second)
	began = time.Now()
	out, errOut, rc = runBin(t, installed, append([]string{"update"}, dirs...)...)
	if rc == 0 || !strings.Contains(errOut, "did not link") {
		t.Fatalf("update to a broken binary: exit %d\n%s%s", rc, out, errOut)
	}
	testkit.Eventually(t, 75*time.Second-time.Since(began), func() error {
		if v, _ := device(); v != "1.1.0" {
			return fmt.Errorf("the device is on %q", v)
		}
		return nil
	})
	t.Logf("rollback: %s from the command to the previous agent linked", time.Since(began).Round(time.Millisecond))
	if got, _ := os.ReadFile(installed); string(got) != string(newBytes) {
		t.Error("the previous binary is not back in place")
	}
	if st := status(); st.Update == nil || st.Update.Last == nil || st.Update.Last.State != "rolled_back" || st.Update.Last.To != "1.2.0" {
		t.Errorf("status after the rollback: %+v", st.Update)
	}
	human, _, _ := runBin(t, installed, append([]string{"status"}, dirs...)...)
	if !strings.Contains(human, "rolled back") {
		t.Errorf("status does not say the update was rolled back:\n%s", human)
	}
	journal, _, _ := runBin(t, installed, append([]string{"activity", "--last", "10000", "--json"}, dirs...)...)
	for _, want := range []string{`"reason":"update_started"`, `"reason":"update_linked"`, `"reason":"update_rolled_back"`} {
		if !strings.Contains(journal, want) {
			t.Errorf("the journal lacks %s:\n%s", want, journal)
		}
	}

	// Under auto the relay asks the agent to update as it links.
	latest, _ := os.ReadFile(buildVersion(t, "1.3.0"))
	began = time.Now()
	restartRelay(releaseOf(t, "1.3.0", latest), "--agent-updates", "auto")
	linkedAs("1.3.0", "", 75*time.Second)
	logSteps(t, installed, dirs, began)
	if got, _ := os.ReadFile(installed); string(got) != string(latest) {
		t.Error("auto did not put the offered binary in place")
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		if audit := e.relayCmd("audit", "--last", "20", "--json"); !strings.Contains(audit, `"tool":"relay.agent_update"`) {
			return fmt.Errorf("the relay did not audit the update it asked for:\n%s", audit)
		}
		return nil
	})

	// A downgrade needs the flag; nothing is fetched without it, and
	// auto never asks for one.
	restartRelay(releaseOf(t, "0.9.0", data), "--agent-updates", "auto")
	linkedAs("1.3.0", "0.9.0", 40*time.Second)
	out, errOut, rc = runBin(t, installed, append([]string{"update"}, dirs...)...)
	if rc == 0 || !strings.Contains(errOut, "--allow-downgrade") {
		t.Fatalf("a downgrade without the flag: exit %d\n%s%s", rc, out, errOut)
	}
	if got, _ := os.ReadFile(installed); string(got) != string(latest) {
		t.Error("a refused downgrade changed the installed binary")
	}
}

// logSteps logs when each step of the update begun at began happened, from
// the journal: the binary fetched, verified and in place with the
// watchdog started (update_started), the new agent up (agent_start), its
// link (link_up), the watchdog's verdict (update_linked). BENCHMARKS.md
// reports them.
func logSteps(t *testing.T, exe string, dirs []string, began time.Time) {
	t.Helper()
	out, _, _ := runBin(t, exe, append([]string{"activity", "--last", "10000", "--json"}, dirs...)...)
	var steps []string
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e struct {
			Time   time.Time `json:"time"`
			Kind   string    `json:"kind"`
			Reason string    `json:"reason"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Time.Before(began) {
			continue
		}
		step := e.Kind
		if e.Reason != "" && e.Kind == "update" {
			step = e.Reason
		}
		if seen[step] || (e.Kind != "update" && e.Kind != "agent_start" && e.Kind != "link_up") {
			continue
		}
		seen[step] = true
		steps = append(steps, fmt.Sprintf("%s +%s", step, e.Time.Sub(began).Round(time.Millisecond)))
	}
	t.Logf("update steps: %s", strings.Join(steps, ", "))
}
