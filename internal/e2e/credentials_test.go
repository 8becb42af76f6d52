package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/testkit"
)

// storedTokens reads the device tokens in an agent's identity file.
func storedTokens(t *testing.T, configDir string) (token, previous string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(configDir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var id struct {
		Token         string `json:"token"`
		PreviousToken string `json:"previous_token"`
	}
	if err := json.Unmarshal(data, &id); err != nil {
		t.Fatal(err)
	}
	return id.Token, id.PreviousToken
}

// waitRotatedFrom waits until the agent stored a token rotated in on a
// link opened with from ("": any link), and returns it.
func waitRotatedFrom(t *testing.T, configDir, from string) string {
	t.Helper()
	var tok string
	testkit.Eventually(t, 20*time.Second, func() error {
		var prev string
		if tok, prev = storedTokens(t, configDir); prev == "" || (prev != from && from != "") || tok == prev {
			return errors.New("the agent never stored a rotated token")
		}
		return nil
	})
	return tok
}

// deviceJSON is one line of `relay devices --json`.
type deviceJSON struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Connected bool   `json:"connected"`
	Standing  string `json:"standing"`
}

func (e *relayEnv) devices() []deviceJSON {
	e.t.Helper()
	var out []deviceJSON
	for _, line := range strings.Split(e.relayCmd("devices", "--json"), "\n") {
		var d deviceJSON
		if json.Unmarshal([]byte(line), &d) == nil && d.ID != "" {
			out = append(out, d)
		}
	}
	return out
}

// waitDevice waits (at most within) until the named device's record
// satisfies ok.
func (e *relayEnv) waitDevice(name string, within time.Duration, ok func(deviceJSON) bool) deviceJSON {
	e.t.Helper()
	var found deviceJSON
	testkit.Eventually(e.t, within, func() error {
		devices := e.devices()
		for _, d := range devices {
			if d.Name == name && ok(d) {
				found = d
				return nil
			}
		}
		return fmt.Errorf("device %s never got there: %+v", name, devices)
	})
	return found
}

// agentWith starts an agent on the given directories.
func agentWith(t *testing.T, state, config string) *exec.Cmd {
	t.Helper()
	a := exec.Command(bin, "agent", "--state-dir", state, "--config-dir", config)
	a.Stderr = os.Stderr
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Process.Kill(); a.Wait() })
	return a
}

// journalHas waits until the agent's activity journal holds want.
func journalHas(t *testing.T, state, want string) string {
	t.Helper()
	var out string
	testkit.Eventually(t, 20*time.Second, func() error {
		if out, _, _ = run(t, "activity", "--last", "200", "--json", "--state-dir", state); !strings.Contains(out, want) {
			return fmt.Errorf("the journal never held %s:\n%s", want, out)
		}
		return nil
	})
	return out
}

// TestRelayAgentBackWithinSecondsAfterCrash: an agent SIGKILLed and
// restarted at once serves calls again within 5 s; so does one started
// while the old process is frozen with its link open (the relay's check of
// the old link fails fast instead of waiting out the 45 s silence).
func TestRelayAgentBackWithinSecondsAfterCrash(t *testing.T) {
	e, c := onlineDevice(t)
	e.agent.Process.Signal(syscall.SIGKILL)
	e.agent.Wait()
	restarted := time.Now()
	e.startAgent()
	waitOnline(t, c, nil)
	if took := time.Since(restarted); took > 5*time.Second {
		t.Fatalf("a restarted agent took %s to serve calls again", took)
	}

	frozen := e.agent
	if err := frozen.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	restarted = time.Now()
	e.startAgent()
	waitOnline(t, c, nil)
	if took := time.Since(restarted); took > 5*time.Second {
		t.Fatalf("an agent started beside a frozen one took %s to serve calls", took)
	}
	frozen.Process.Signal(syscall.SIGKILL)
	c.ok("process.jobs", nil, nil)
}

// TestRelayCopiedCredentials: a copy of a linked agent's credentials is
// refused with device_busy; once the agent rotated them away, the copy
// marks the device compromised and no link serves calls; enrolling the
// device again under its name recovers it for the same client token.
func TestRelayCopiedCredentials(t *testing.T) {
	e, c := onlineDevice(t)
	current := waitRotatedFrom(t, e.agentConfig, "")

	// The copy, taken now, runs as an agent somewhere else.
	copyConfig, copyState := t.TempDir(), t.TempDir()
	data, err := os.ReadFile(filepath.Join(e.agentConfig, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copyConfig, "identity.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	impostor := agentWith(t, copyState, copyConfig)
	journalHas(t, copyState, `"reason":"device_busy"`)
	impostor.Process.Signal(syscall.SIGKILL)
	impostor.Wait()
	c.ok("process.jobs", nil, nil)
	if d := e.waitDevice("dev1", time.Second, func(deviceJSON) bool { return true }); d.Standing != "active" || !d.Connected {
		t.Fatalf("after the refused copy: %+v", d)
	}

	// The real agent links again, which rotates the copied token away.
	e.agent.Process.Signal(syscall.SIGTERM)
	e.agent.Wait()
	e.startAgent()
	waitRotatedFrom(t, e.agentConfig, current)
	waitOnline(t, c, nil)

	impostor = agentWith(t, copyState, copyConfig)
	d := e.waitDevice("dev1", 20*time.Second, func(d deviceJSON) bool { return d.Standing == "compromised" })
	e.waitDevice("dev1", 5*time.Second, func(d deviceJSON) bool { return !d.Connected })
	if code, _ := c.fail("process.jobs", nil); code != "device_offline" {
		t.Fatalf("a call to a compromised device: %s", code)
	}
	// Both agents are refused from now on.
	journalHas(t, e.agentState, `"reason":"authentication_failure"`)
	journalHas(t, copyState, `"reason":"authentication_failure"`)
	if code, _ := c.fail("process.jobs", nil); code != "device_offline" {
		t.Fatalf("a call after both agents retried: %s", code)
	}
	if out := e.relayCmd("devices"); !strings.Contains(out, "STANDING") || !strings.Contains(out, "compromised") {
		t.Fatalf("relay devices:\n%s", out)
	}
	impostor.Process.Signal(syscall.SIGKILL)
	impostor.Wait()

	// Enrolled again under its name, the device serves the same token.
	code := e.relayCmd("enroll-code", "--name", "dev1")
	if _, errOut, rc := run(t, "enroll", "--force", "--server", e.url, "--code", code, "--state-dir", e.agentState, "--config-dir", e.agentConfig); rc != 0 {
		t.Fatalf("enroll again: %s", errOut)
	}
	e.agent.Process.Signal(syscall.SIGTERM)
	e.agent.Wait()
	e.startAgent()
	waitOnline(t, c, nil)
	devs := e.devices()
	if len(devs) != 1 || devs[0].Name != "dev1" || devs[0].ID == d.ID || devs[0].Standing != "active" {
		t.Fatalf("after enrolling again: %+v", devs)
	}
}

// TestRelayDeviceRevoke: `relay devices revoke` (another process than the
// relay) ends the device's link at once, and the agent's later attempts
// are refused.
func TestRelayDeviceRevoke(t *testing.T) {
	e, c := onlineDevice(t)
	if out := e.relayCmd("devices", "revoke", "dev1"); !strings.Contains(out, "revoked dev1") {
		t.Fatalf("revoke: %s", out)
	}
	e.waitDevice("dev1", 5*time.Second, func(d deviceJSON) bool { return !d.Connected && d.Standing == "revoked" })
	if code, _ := c.fail("process.jobs", nil); code != "device_offline" {
		t.Fatalf("a call to a revoked device: %s", code)
	}
	journalHas(t, e.agentState, `"reason":"authentication_failure"`)
	if out := e.relayCmd("devices", "revoke", "dev1"); !strings.Contains(out, "revoked already") {
		t.Fatalf("revoking again: %s", out)
	}
	if _, errOut, rc := run(t, "relay", "devices", "revoke", "nope", "--state-dir", e.relayState); rc != 1 || !strings.Contains(errOut, "no such device") {
		t.Fatalf("revoking an unknown device: exit %d %q", rc, errOut)
	}
}
