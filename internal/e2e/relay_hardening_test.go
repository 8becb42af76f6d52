package e2e

import (
	"strings"
	"testing"
)

// TestRelayEnrollmentHardening: against `relay serve`, enrollment guesses
// from one address past the burst of 10 are refused as rate-limited, and
// device names shaped like a device ID are refused.
func TestRelayEnrollmentHardening(t *testing.T) {
	e := startRelay(t)
	guess := func() (string, int) {
		_, errOut, rc := run(t, "enroll", "--server", e.url, "--code", "ccE-WRONGWRONGWRONGWRONG", "--name", "box",
			"--state-dir", t.TempDir(), "--config-dir", t.TempDir())
		return errOut, rc
	}
	for i := range 10 {
		if errOut, rc := guess(); rc != 1 || !strings.Contains(errOut, "invalid, expired or used") {
			t.Fatalf("guess %d: exit %d %q", i+1, rc, errOut)
		}
	}
	if errOut, rc := guess(); rc != 1 || !strings.Contains(errOut, "too many enrollment requests") {
		t.Fatalf("guess 11: exit %d %q", rc, errOut)
	}

	for _, name := range []string{"0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a", "0F8E7D6C-5B4A-4392-8170-6F5E4D3C2B1A"} {
		_, errOut, rc := run(t, "relay", "enroll-code", "--name", name, "--state-dir", e.relayState)
		if rc != 2 || !strings.Contains(errOut, "not shaped like a device ID") {
			t.Errorf("enroll-code --name %s: exit %d %q", name, rc, errOut)
		}
	}
}
