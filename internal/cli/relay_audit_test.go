package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/humantime"
	"github.com/commandcore/commandcore/internal/relay/store"
)

func TestRelayAudit(t *testing.T) {
	state := t.TempDir()
	st, err := store.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	var entries []store.AuditEntry
	for i := range 3 {
		entries = append(entries, store.AuditEntry{At: at.Add(time.Duration(i) * time.Second), Principal: "tok_0123456789ab",
			TokenID: "tok_0123456789ab", Device: "0b1e6c52-6a63-4c36-a2a4-8e4a3c1b7d10", Tool: "process.jobs", Outcome: "ok", DurationUS: 2500})
	}
	entries = append(entries, store.AuditEntry{At: at.Add(time.Minute), Tool: "unknown", Outcome: "failed", Code: "permission_denied", DurationUS: 40})
	if err := st.AppendAudit(entries, at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	minute := at.Truncate(time.Minute)
	if err := st.AddRefusalCounts([]store.RefusalCount{{Minute: minute, Source: "192.0.2.7", Count: 5000},
		{Minute: minute.Add(time.Minute), Source: "", Count: 3}, {Minute: minute.Add(2 * time.Minute), Source: "2001:db8::/64", Count: 12}}, at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	st.Close()

	code, out, errOut := runMain("relay", "audit", "--last", "2", "--json", "--state-dir", state)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != ExitOK || len(lines) != 4 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var last struct {
		Kind string `json:"kind"`
		store.AuditEntry
	}
	if err := json.Unmarshal([]byte(lines[1]), &last); err != nil || last.Kind != "call" || last.Tool != "unknown" || last.Code != "permission_denied" || last.TokenID != "" {
		t.Fatalf("last entry %s: %v", lines[1], err)
	}
	if lines[2] != `{"kind":"refusals","minute":"2031-01-02T03:05:00Z","source":"","count":3}` ||
		lines[3] != `{"kind":"refusals","minute":"2031-01-02T03:06:00Z","source":"2001:db8::/64","count":12}` {
		t.Fatalf("refusal lines:\n%s\n%s", lines[2], lines[3])
	}

	code, out, _ = runMain("relay", "audit", "--state-dir", state)
	// Times as the other commands print them, local with the zone; the
	// JSON above keeps RFC 3339.
	calls := table("TIME\tPRINCIPAL\tTOKEN\tDEVICE\tTOOL\tOUTCOME\tCODE\tDURATION",
		humantime.Time(at)+"\ttok_0123456789ab\ttok_0123456789ab\t0b1e6c52-6a63-4c36-a2a4-8e4a3c1b7d10\tprocess.jobs\tok\t-\t2.5ms",
		humantime.Time(at.Add(time.Second))+"\ttok_0123456789ab\ttok_0123456789ab\t0b1e6c52-6a63-4c36-a2a4-8e4a3c1b7d10\tprocess.jobs\tok\t-\t2.5ms",
		humantime.Time(at.Add(2*time.Second))+"\ttok_0123456789ab\ttok_0123456789ab\t0b1e6c52-6a63-4c36-a2a4-8e4a3c1b7d10\tprocess.jobs\tok\t-\t2.5ms",
		humantime.Time(at.Add(time.Minute))+"\t-\t-\t-\tunknown\tfailed\tpermission_denied\t40µs")
	want := strings.SplitAfterN(calls, "\n", 3)
	refusals := strings.SplitAfterN(calls, "\n", 5)[4] +
		"\nRequests refused without a valid client token, per source and minute:\n" +
		table("MINUTE\tSOURCE\tREFUSED", humantime.Time(minute)+"\t192.0.2.7\t5000",
			humantime.Time(minute.Add(time.Minute))+"\t-\t3", humantime.Time(minute.Add(2*time.Minute))+"\t2001:db8::/64\t12")
	if code != ExitOK || !strings.HasPrefix(out, want[0]+want[1]) || !strings.HasSuffix(out, refusals) || strings.Count(out, "\n") != 11 {
		t.Fatalf("exit %d, table:\n%s", code, out)
	}

	for _, bad := range []string{"0", "-3", "100001", "x"} {
		if code, _, _ := runMain("relay", "audit", "--last", bad, "--state-dir", state); code != ExitUsage {
			t.Errorf("--last %s: exit %d", bad, code)
		}
	}
}
