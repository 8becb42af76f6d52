package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLocalServerAppliesTheCeiling: `commandcore mcp` has no grants, but
// the owner's permission ceiling still narrows it, and a ceiling others
// can write refuses everything.
func TestLocalServerAppliesTheCeiling(t *testing.T) {
	cfg := t.TempDir()
	file := filepath.Join(cfg, "permissions.json")
	if err := os.WriteFile(file, []byte(`{"schema_version":1,"tools":["system.metrics"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, t.TempDir(), nil, "--config-dir", cfg)
	c.ok("system.metrics", nil, nil)
	if code, _ := c.fail("process.start", map[string]any{"command": "true"}); code != "permission_denied" {
		t.Fatalf("process.start outside the ceiling: %s", code)
	}
	// status shows the owner what the ceiling allows, and when it is broken.
	state := t.TempDir()
	out, _, _ := run(t, "status", "--json", "--state-dir", state, "--config-dir", cfg)
	var st struct {
		Permissions struct {
			Present bool
			Tools   []string
		}
	}
	if json.Unmarshal([]byte(out), &st) != nil || !st.Permissions.Present || strings.Join(st.Permissions.Tools, ",") != "system.metrics" {
		t.Fatalf("status --json: %s", out)
	}
	os.Chmod(file, 0o622)
	if code, msg := c.fail("system.metrics", nil); code != "permission_denied" || msg == "" {
		t.Fatalf("a ceiling others can write: %s %q", code, msg)
	}
	if out, _, _ = run(t, "status", "--state-dir", state, "--config-dir", cfg); !strings.Contains(out, "Permissions: INVALID (it is accessible by other users)") {
		t.Fatalf("status with a broken ceiling:\n%s", out)
	}
}
