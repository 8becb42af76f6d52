package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/pgtest"
)

// TestRelayCommandsShareAPostgresDatabase: with --database (or its
// environment variable) the relay's commands keep their state in a real
// PostgreSQL database, not in the state directory: a token created through
// the flag is listed through the variable, from another state directory.
func TestRelayCommandsShareAPostgresDatabase(t *testing.T) {
	c := pgtest.StartT(t)
	url, err := c.CreateDatabase("relay")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runMain("relay", "token", "create", "--name", "ci", "--database", url, "--state-dir", t.TempDir())
	if code != ExitOK || !strings.HasPrefix(out, "cct_") {
		t.Fatalf("token create on PostgreSQL: %d %q %q", code, out, errOut)
	}
	t.Setenv(relayDatabaseEnv, url)
	code, out, errOut = runMain("relay", "token", "list", "--json", "--state-dir", t.TempDir())
	var token struct{ Name string }
	if code != ExitOK || json.Unmarshal([]byte(out), &token) != nil || token.Name != "ci" {
		t.Fatalf("token list through $%s: %d %q %q", relayDatabaseEnv, code, out, errOut)
	}
	// The flag wins over the variable; an unreachable server is one line.
	code, _, errOut = runMain("relay", "devices", "--database", "postgres://relay:hunter2@/relay?host="+t.TempDir()+"&connect_timeout=2")
	if code == ExitOK || errOut != "commandcore: unavailable: cannot reach the relay state database\n" {
		t.Fatalf("an unreachable database: %d %q", code, errOut)
	}
}
