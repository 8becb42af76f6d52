package e2e

import (
	"os"
	"path/filepath"
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
	os.Chmod(file, 0o622)
	if code, msg := c.fail("system.metrics", nil); code != "permission_denied" || msg == "" {
		t.Fatalf("a ceiling others can write: %s %q", code, msg)
	}
}
