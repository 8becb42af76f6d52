package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
)

// TestMigrateMovesARelayToPostgres: a relay's SQLite state copied into an
// empty PostgreSQL database authenticates the same device and client
// tokens, keeps standings, the grant key, enrollment codes and the audit
// log in order, and goes on numbering the audit after it.
func TestMigrateMovesARelayToPostgres(t *testing.T) {
	needPostgres(t)
	from := openT(t, t.TempDir())
	key, _ := from.GrantKey()
	dev, devTok := enrollT(t, from, "", "box")
	gone, _ := enrollT(t, from, "", "gone")
	from.RevokeDevice(gone.ID, t0)
	next := NewDeviceToken()
	if err := from.RotateDeviceToken(dev.ID, devTok, next, t0); err != nil {
		t.Fatal(err)
	}
	unused := mustCode(t, from, "later", time.Hour, t0)
	var bearers []string
	for i := range 3 {
		_, b, err := from.CreateToken(TokenSpec{Name: fmt.Sprint("tk", i), Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, t0)
		if err != nil {
			t.Fatal(err)
		}
		bearers = append(bearers, b)
	}
	entries := []AuditEntry{{At: t0, Principal: "p", TokenID: "tok_0123456789ab", Device: dev.ID, Tool: "process.run", Outcome: AuditOK, DurationUS: 5}}
	if err := from.AppendAudit(append(entries, entries[0]), t0); err != nil {
		t.Fatal(err)
	}
	if err := from.AddRefusalCounts([]RefusalCount{{Minute: t0.Truncate(time.Minute), Source: "192.0.2.1", Count: 3}}, t0); err != nil {
		t.Fatal(err)
	}

	if _, err := from.SSOSignIn("alice_at_example.com", t0); err != nil {
		t.Fatal(err)
	}
	if err := from.AddPasskey("alice_at_example.com", []byte("cred-1"), []byte(`{"record":1}`), t0); err != nil {
		t.Fatal(err)
	}

	to := openT(t, newPostgresDatabase(t))
	counts, err := Migrate(from, to)
	if err != nil {
		t.Fatal(err)
	}
	if counts["devices"] != 2 || counts["tokens"] != 3 || counts["audit"] != 2 || counts["retired_device_tokens"] != 1 || counts["settings"] != 1 {
		t.Fatalf("copied %v", counts)
	}
	if k, _ := to.GrantKey(); !k.Equal(key) {
		t.Fatal("the grant key changed")
	}
	if d, _, err := to.AuthDevice(next, t0); err != nil || d.ID != dev.ID {
		t.Fatalf("the device's current token after the move: %v, %v", d, err)
	}
	if r := refusal(t, to, devTok, t0); r == nil || r.Standing != StandingCompromised {
		t.Fatalf("a rotated-away token after the move: %+v", r)
	}
	if d, _ := to.FindDevice("gone"); d.Standing != StandingRevoked {
		t.Fatalf("a revoked device after the move: %+v", d)
	}
	for _, b := range bearers {
		if _, err := to.AuthToken(b, t0); err != nil {
			t.Fatalf("a client token after the move: %v", err)
		}
	}
	fromTokens, _ := from.Tokens()
	toTokens, _ := to.Tokens()
	for i := range fromTokens {
		if toTokens[i].ID != fromTokens[i].ID {
			t.Fatalf("token order changed: %v then %v", fromTokens, toTokens)
		}
	}
	if _, _, _, err := to.Enroll(unused, "", t0); err != nil {
		t.Fatalf("an unused enrollment code after the move: %v", err)
	}
	if err := to.AppendAudit(entries, t0); err != nil {
		t.Fatal(err)
	}
	log, err := to.Audit(10)
	if err != nil || len(log) != 3 || log[0].Seq != 1 || log[2].Seq != 3 {
		t.Fatalf("the audit after the move: %+v, %v", log, err)
	}
	if rc, _ := to.RefusalCounts(10); len(rc) != 1 || rc[0].Count != 3 {
		t.Fatalf("the refusal counts after the move: %+v", rc)
	}
	if admin, _, err := to.PasskeySignIn([]byte("cred-1"), []byte(`{"record":2}`), t0); err != nil || admin != "alice_at_example.com" {
		t.Fatalf("a passkey after the move: %q, %v", admin, err)
	}
	// Into a database that holds state already: refused, nothing merged.
	_, err = Migrate(from, to)
	wantCode(t, err, errcode.AlreadyExists)
}
