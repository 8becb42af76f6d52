package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/relaystate"
)

func TestRelayAudit(t *testing.T) {
	state := t.TempDir()
	st, err := relaystate.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	var entries []relaystate.AuditEntry
	for i := range 3 {
		entries = append(entries, relaystate.AuditEntry{At: at.Add(time.Duration(i) * time.Second), Principal: "tok_0123456789ab",
			TokenID: "tok_0123456789ab", Device: "0b1e6c52-6a63-4c36-a2a4-8e4a3c1b7d10", Tool: "process.jobs", Outcome: "ok", DurationUS: 2500})
	}
	entries = append(entries, relaystate.AuditEntry{At: at.Add(time.Minute), Tool: "unknown", Outcome: "failed", Code: "permission_denied", DurationUS: 40})
	if err := st.AppendAudit(entries, at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	st.Close()

	code, out, errOut := runMain("relay", "audit", "--last", "2", "--json", "--state-dir", state)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != ExitOK || len(lines) != 2 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var last relaystate.AuditEntry
	if err := json.Unmarshal([]byte(lines[1]), &last); err != nil || last.Tool != "unknown" || last.Code != "permission_denied" || last.TokenID != "" {
		t.Fatalf("last entry %s: %v", lines[1], err)
	}

	code, out, _ = runMain("relay", "audit", "--state-dir", state)
	want := "TIME                  PRINCIPAL         TOKEN             DEVICE                                TOOL          OUTCOME  CODE               DURATION\n" +
		"2031-01-02T03:04:05Z  tok_0123456789ab  tok_0123456789ab  0b1e6c52-6a63-4c36-a2a4-8e4a3c1b7d10  process.jobs  ok       -                  2.5ms\n"
	if code != ExitOK || !strings.HasPrefix(out, want) || !strings.HasSuffix(out, "2031-01-02T03:05:05Z  -                 -                 -                                     unknown       failed   permission_denied  40µs\n") ||
		strings.Count(out, "\n") != 5 {
		t.Fatalf("exit %d, table:\n%s", code, out)
	}

	for _, bad := range []string{"0", "-3", "100001", "x"} {
		if code, _, _ := runMain("relay", "audit", "--last", bad, "--state-dir", state); code != ExitUsage {
			t.Errorf("--last %s: exit %d", bad, code)
		}
	}
}
