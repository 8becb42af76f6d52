package systemdtest

import (
	"os/exec"
	"strings"
	"testing"
)

// LoadState is unit's LoadState as the user manager reports it
// (`not-found` once a finished unit is unloaded).
func LoadState(tb testing.TB, unit string) string {
	tb.Helper()
	out, err := exec.Command("systemctl", "--user", "show", "-p", "LoadState", "--value", unit).Output()
	if err != nil {
		tb.Fatalf("systemctl show: %v", err)
	}
	return strings.TrimSpace(string(out))
}
