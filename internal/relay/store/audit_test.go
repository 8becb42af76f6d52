package store

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
)

func auditCall(at time.Time, tool string) AuditEntry {
	return AuditEntry{At: at, Principal: "tok_0123456789ab", TokenID: "tok_0123456789ab",
		Device: "0b1e6c52-6a63-4c36-a2a4-8e4a3c1b7d10", Tool: tool, Outcome: AuditOK, DurationUS: 1500}
}

func auditCount(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM audit`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAuditAppendAndRead(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		if got, err := s.Audit(5); err != nil || len(got) != 0 {
			t.Fatalf("empty log: %v %v", got, err)
		}
		failed := AuditEntry{At: t0.Add(time.Second), Tool: "unknown", Outcome: AuditFailed, Code: "permission_denied"}
		if err := s.AppendAudit([]AuditEntry{auditCall(t0, "process.jobs"), failed}, t0); err != nil {
			t.Fatal(err)
		}
		withJob := auditCall(t0.Add(2*time.Second), "devices.list")
		withJob.Job = "5fa7e0b2-8c1d-4e3f-9a6b-0d2c4e6f8a1b"
		if err := s.AppendAudit([]AuditEntry{withJob}, t0); err != nil {
			t.Fatal(err)
		}
		got, err := s.Audit(2)
		if err != nil {
			t.Fatal(err)
		}
		// The newest two, oldest first.
		if len(got) != 2 || got[0].Tool != "unknown" || got[0].Code != "permission_denied" || got[0].TokenID != "" ||
			got[1].Tool != "devices.list" || got[1].Outcome != "ok" || !got[1].At.Equal(t0.Add(2*time.Second)) ||
			got[1].DurationUS != 1500 || got[1].Seq <= got[0].Seq {
			t.Fatalf("audit: %+v", got)
		}
		raw, _ := json.Marshal(got[1])
		want := `{"seq":3,"at":"2031-03-04T05:06:09.000000008Z","principal":"tok_0123456789ab","token_id":"tok_0123456789ab",` +
			`"device":"0b1e6c52-6a63-4c36-a2a4-8e4a3c1b7d10","job":"5fa7e0b2-8c1d-4e3f-9a6b-0d2c4e6f8a1b","tool":"devices.list","outcome":"ok","duration_us":1500}`
		if string(raw) != want {
			t.Fatalf("JSON:\n%s\nwant\n%s", raw, want)
		}
		for _, n := range []int{0, -1, 100001} {
			if _, err := s.Audit(n); !errcode.Is(err, errcode.InvalidArgument) {
				t.Errorf("Audit(%d): %v", n, err)
			}
		}
	})
}

func TestAuditRefusesContent(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		bad := []func(*AuditEntry){
			func(e *AuditEntry) { e.Tool = "rm -rf /" },
			func(e *AuditEntry) { e.Tool = "" },
			func(e *AuditEntry) { e.Tool = strings.Repeat("a", 65) },
			func(e *AuditEntry) { e.Principal = "alice\x1b[2J" },
			func(e *AuditEntry) { e.Principal = "a\u202eb" },
			func(e *AuditEntry) { e.Principal = "two words" },
			func(e *AuditEntry) { e.TokenID = "cct_secret" },
			func(e *AuditEntry) { e.Device = "a/b" },
			func(e *AuditEntry) { e.Job = "../../build-box/revoke?x=" },
			func(e *AuditEntry) { e.Job = "5FA7E0B2-8C1D-4E3F-9A6B-0D2C4E6F8A1B" },
			func(e *AuditEntry) { e.Outcome = "maybe" },
			func(e *AuditEntry) { e.Code = "not_found" }, // an ok call has no code
			func(e *AuditEntry) { e.Outcome, e.Code = AuditFailed, "" },
			func(e *AuditEntry) { e.Outcome, e.Code = AuditFailed, "No such file: /etc/x" },
			func(e *AuditEntry) { e.DurationUS = -1 },
		}
		for i, mutate := range bad {
			e := auditCall(t0, "process.run")
			mutate(&e)
			if err := s.AppendAudit([]AuditEntry{auditCall(t0, "process.run"), e}, t0); !errcode.Is(err, errcode.InvalidArgument) {
				t.Errorf("entry %d (%+v): %v", i, e, err)
			}
		}
		if n := auditCount(t, s); n != 0 {
			t.Fatalf("%d refused entries were written", n)
		}
	})
}

// TestAuditKeepsTheNewestEntries uses a small bound through the seam.
func TestAuditKeepsTheNewestEntries(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		s.audit.entries = 5
		for i := range 12 {
			if err := s.AppendAudit([]AuditEntry{auditCall(t0.Add(time.Duration(i)*time.Second), "process.jobs")}, t0); err != nil {
				t.Fatal(err)
			}
			if n := auditCount(t, s); n > 5 {
				t.Fatalf("after %d calls the log holds %d entries", i+1, n)
			}
		}
		got, err := s.Audit(100)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 5 || got[0].Seq != 8 || !got[0].At.Equal(t0.Add(7*time.Second)) || got[4].Seq != 12 {
			t.Fatalf("kept %+v", got)
		}
	})
}

// TestAuditBoundsOfTheSpec: 100,000 entries and 90 days (docs/limits.md).
func TestAuditBoundsOfTheSpec(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		day := 24 * time.Hour
		old := auditCall(t0.Add(-91*day), "process.start")
		kept := auditCall(t0.Add(-89*day), "process.status")
		if err := s.AppendAudit([]AuditEntry{old, kept}, t0); err != nil {
			t.Fatal(err)
		}
		got, err := s.Audit(10)
		if err != nil || len(got) != 1 || got[0].Tool != "process.status" {
			t.Fatalf("after the age prune: %+v %v", got, err)
		}
		// Fill the log to 100,000 entries in one statement, then add one more.
		_, err = s.db.ExecContext(context.Background(), `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 99999)
			INSERT INTO audit(at, principal, token_id, device, tool, outcome, code, duration_us)
			SELECT ?, '', '', '', 'process.jobs', 'ok', '', 1 FROM n`, t0.UnixNano())
		if err != nil {
			t.Fatal(err)
		}
		if n := auditCount(t, s); n != 100000 {
			t.Fatalf("filled to %d", n)
		}
		if err := s.AppendAudit([]AuditEntry{auditCall(t0, "files.search")}, t0); err != nil {
			t.Fatal(err)
		}
		if n := auditCount(t, s); n != 100000 {
			t.Fatalf("the log holds %d entries, want 100000", n)
		}
		var oldest int64
		if err := s.db.QueryRow(`SELECT min(seq) FROM audit`).Scan(&oldest); err != nil || oldest != 3 {
			t.Fatalf("the oldest entry is seq %d (%v), want 3: the 89-day-old entry (seq 2) goes first", oldest, err)
		}
		got, err = s.Audit(1)
		if err != nil || len(got) != 1 || got[0].Tool != "files.search" {
			t.Fatalf("newest entry: %+v %v", got, err)
		}
		// Pruning alone, as the relay does at start, applies the age bound.
		if err := s.AppendAudit(nil, t0.Add(91*day)); err != nil {
			t.Fatal(err)
		}
		if n := auditCount(t, s); n != 0 {
			t.Fatalf("%d entries older than 90 days survived", n)
		}
	})
}

func TestAuditReadRefusesACorruptRow(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		if _, err := s.db.Exec(`INSERT INTO audit(at, principal, token_id, device, tool, outcome, code, duration_us)
			VALUES (1, 'x', '', '', 'process.run', 'ok', '', 1), (2, '', '', '', 'echo secret', 'ok', '', 1)`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Audit(1); !errcode.Is(err, errcode.Internal) || strings.Contains(err.Error(), "secret") {
			t.Fatalf("corrupt row: %v", err)
		}
	})
}

// FuzzDecodeAudit: the audit reader never panics, and what it accepts is
// content-free: it is valid for AppendAudit and its JSON is printable.
func FuzzDecodeAudit(f *testing.F) {
	f.Add(int64(1), t0.UnixNano(), "tok_0123456789ab", "tok_0123456789ab", "0b1e6c52-6a63-4c36-a2a4-8e4a3c1b7d10", "5fa7e0b2-8c1d-4e3f-9a6b-0d2c4e6f8a1b", "process.run", "ok", "", int64(5))
	f.Add(int64(2), int64(0), "", "", "", "", "unknown", "failed", "permission_denied", int64(0))
	f.Add(int64(3), int64(-1), "a\u202e", "tok_", "../x", "../../x/revoke", "Process.Run", "failed", "bad code", int64(-5))
	f.Fuzz(func(t *testing.T, seq, at int64, principal, token, device, job, tool, outcome, code string, dur int64) {
		e, err := decodeAudit(seq, at, principal, token, device, job, tool, outcome, code, dur)
		if err != nil {
			if e != nil || !errcode.Is(err, errcode.Internal) {
				t.Fatalf("refusal: %v %+v", err, e)
			}
			return
		}
		if !validAudit(e) || e.Seq < 1 || e.DurationUS < 0 {
			t.Fatalf("accepted an invalid entry: %+v", e)
		}
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range string(raw) {
			if r < 0x20 || r == 0x7f {
				t.Fatalf("control character in %q", raw)
			}
		}
	})
}
