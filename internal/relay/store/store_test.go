package store

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
)

var t0 = time.Date(2031, 3, 4, 5, 6, 7, 8, time.UTC)

func openT(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := openPlace(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func wantCode(t *testing.T, err error, code errcode.Code) {
	t.Helper()
	if !errcode.Is(err, code) {
		t.Fatalf("error %v, want code %s", err, code)
	}
}

func TestOpenModesAndSchema(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "state")
	s := openT(t, dir)
	if _, _, err := s.CreateToken(TokenSpec{Name: "x", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, t0); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("state dir mode %v, want 0700", fi.Mode().Perm())
	}
	for _, name := range []string{File, File + "-wal", File + "-shm"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if name == File && err != nil {
			t.Fatal(err)
		}
		if err == nil && fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	var mode string
	var version int
	if err := s.db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q %v", mode, err)
	}
	if err := s.db.QueryRow("PRAGMA user_version").Scan(&version); err != nil || version != SchemaVersion {
		t.Fatalf("user_version %d %v", version, err)
	}
	var busy int
	if err := s.db.QueryRow("PRAGMA busy_timeout").Scan(&busy); err != nil || busy != 5000 {
		t.Fatalf("busy_timeout %d %v", busy, err)
	}
}

func TestOpenTightensExistingFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, File)
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	openT(t, dir)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v, want 0600", fi.Mode().Perm(), err)
	}
}

func TestOpenRefusesSymlinkAndHidesPath(t *testing.T) {
	dir := t.TempDir()
	secretDir := filepath.Join(t.TempDir(), "MARKERPATH")
	if err := os.Mkdir(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(secretDir, "x.db"), filepath.Join(dir, File)); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err == nil {
		s.Close()
		t.Fatal("Open followed a symlinked relay.db")
	}
	if strings.Contains(err.Error(), "MARKERPATH") || strings.Contains(err.Error(), dir) {
		t.Fatalf("error leaks a path: %v", err)
	}
	if _, err := os.Stat(filepath.Join(secretDir, "x.db")); err == nil {
		t.Fatal("symlink target was created")
	}
}

func TestGrantKeyStable(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		dir := newPlace(t)
		// Two Stores (as two processes) creating the key at once agree on it.
		a, b := openT(t, dir), openT(t, dir)
		keys := make([]ed25519.PrivateKey, 8)
		var wg sync.WaitGroup
		for i := range keys {
			wg.Go(func() {
				s := a
				if i%2 == 1 {
					s = b
				}
				k, err := s.GrantKey()
				if err != nil {
					t.Error(err)
				}
				keys[i] = k
			})
		}
		wg.Wait()
		for _, k := range keys {
			if len(k) != ed25519.PrivateKeySize || !k.Equal(keys[0]) {
				t.Fatal("concurrent GrantKey calls returned different keys")
			}
		}
		a.Close()
		b.Close()
		c := openT(t, dir)
		k, err := c.GrantKey()
		if err != nil {
			t.Fatal(err)
		}
		if !k.Equal(keys[0]) {
			t.Fatal("grant key changed across reopen")
		}
		// A different state directory has a different key.
		other, err := openT(t, newPlace(t)).GrantKey()
		if err != nil || other.Equal(k) {
			t.Fatalf("two relays share a grant key (%v)", err)
		}
		msg := []byte("m")
		if !ed25519.Verify(k.Public().(ed25519.PublicKey), msg, ed25519.Sign(k, msg)) {
			t.Fatal("grant key does not sign")
		}
	})
}

// TestClusterKeyStable: two stores on one database creating the cluster
// key at once agree on it, it survives a reopen, it is ClusterKeyBytes
// long, and it is neither another database's nor the grant key's seed.
func TestClusterKeyStable(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		dir := newPlace(t)
		a, b := openT(t, dir), openT(t, dir)
		keys := make([][]byte, 8)
		var wg sync.WaitGroup
		for i := range keys {
			wg.Go(func() {
				s := a
				if i%2 == 1 {
					s = b
				}
				k, err := s.ClusterKey()
				if err != nil {
					t.Error(err)
				}
				keys[i] = k
			})
		}
		wg.Wait()
		for _, k := range keys {
			if len(k) != 32 || !bytes.Equal(k, keys[0]) {
				t.Fatalf("concurrent ClusterKey calls returned different keys or a key of %d bytes", len(k))
			}
		}
		a.Close()
		b.Close()
		c := openT(t, dir)
		k, err := c.ClusterKey()
		if err != nil || !bytes.Equal(k, keys[0]) {
			t.Fatalf("cluster key changed across reopen (%v)", err)
		}
		g, err := c.GrantKey()
		if err != nil || bytes.Equal(g.Seed(), k) {
			t.Fatalf("the cluster key is the grant key's seed (%v)", err)
		}
		if other, err := openT(t, newPlace(t)).ClusterKey(); err != nil || bytes.Equal(other, k) {
			t.Fatalf("two databases share a cluster key (%v)", err)
		}
	})
}

// TestSecretsStoredOnlyAsHashes looks for every secret in the raw database
// files (on PostgreSQL: every row of every table, as text), and checks that the test really sees stored data by finding the
// secrets' hashes there.
func TestSecretsStoredOnlyAsHashes(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		dir := newPlace(t)
		s := openT(t, dir)
		code, err := s.CreateEnrollCode("", time.Hour, t0)
		if err != nil {
			t.Fatal(err)
		}
		unused, err := s.CreateEnrollCode("", time.Hour, t0)
		if err != nil {
			t.Fatal(err)
		}
		_, devTok, secret, err := s.Enroll(code, "box", t0)
		if err != nil {
			t.Fatal(err)
		}
		_, bearer, err := s.CreateToken(TokenSpec{Name: "tk", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, t0)
		if err != nil {
			t.Fatal(err)
		}
		raw := func() []byte { return rawState(t, dir) }
		check := func(stage string, all []byte) {
			for _, m := range []string{code, unused, devTok, bearer, devTok[4:], bearer[len(bearer)-43:],
				strings.ToLower(code), code[4:]} {
				if holds(all, []byte(m)) {
					t.Fatalf("%s: a secret appears in the raw database files", stage)
				}
			}
			for _, m := range []string{code, unused, devTok, bearer} {
				if !holds(all, hashSecret(m)) {
					t.Fatalf("%s: a secret's hash is missing from the raw files (test reads the wrong data?)", stage)
				}
			}
			// The heartbeat secret is stored as is (the relay verifies MACs).
			if !holds(all, secret) {
				t.Fatalf("%s: device secret not stored", stage)
			}
		}
		check("open", raw())
		s.Close()
		check("closed", raw())
	})
}

func TestValidName(t *testing.T) {
	good := []string{"a", "laptop-1", "A.b_c-D", strings.Repeat("x", 64), "0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"}
	bad := []string{"", ".", "..", strings.Repeat("x", 65), "a b", "a/b", "é", "a\x00", "a:b", "\xff"}
	for _, n := range good {
		if !ValidName(n) {
			t.Errorf("ValidName(%q) = false", n)
		}
	}
	for _, n := range bad {
		if ValidName(n) {
			t.Errorf("ValidName(%q) = true", n)
		}
	}
}

func TestValidDeviceName(t *testing.T) {
	for _, n := range []string{"laptop", "0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1", "0f8e7d6c5b4a439281706f5e4d3c2b1a", "0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1g"} {
		if !ValidDeviceName(n) {
			t.Errorf("ValidDeviceName(%q) = false", n)
		}
	}
	for _, n := range []string{"", "a b", "0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a", "0F8E7D6C-5B4A-4392-8170-6F5E4D3C2B1A", "00000000-0000-0000-0000-000000000000"} {
		if ValidDeviceName(n) {
			t.Errorf("ValidDeviceName(%q) = true", n)
		}
	}
}

func TestErrorsAreContentFree(t *testing.T) {
	s := openT(t, t.TempDir())
	marker := "MARKER_" + hex.EncodeToString([]byte("secret"))
	errs := []error{}
	add := func(err error) {
		if err == nil {
			t.Fatal("expected an error")
		}
		errs = append(errs, err)
	}
	_, err := s.AuthToken(marker, t0)
	add(err)
	_, _, err = s.AuthDevice(marker, t0)
	add(err)
	_, _, _, err = s.Enroll(marker, "x", t0)
	add(err)
	_, err = s.FindDevice(marker)
	add(err)
	add(s.RevokeToken(marker, t0))
	_, err = s.TakeLink(marker, "r", "", t0)
	add(err)
	_, _, err = s.CreateToken(TokenSpec{Name: marker + " ", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, t0)
	add(err)
	_, _, err = s.CreateToken(TokenSpec{Name: "n", Devices: []string{marker + "/"}, Tools: []string{"*"}, TTL: time.Hour}, t0)
	add(err)
	_, err = s.CreateEnrollCode(marker+"/", time.Hour, t0)
	add(err)
	for _, err := range errs {
		if strings.Contains(err.Error(), "MARKER") {
			t.Fatalf("error echoes its input: %v", err)
		}
	}
}

var (
	codeRE   = regexp.MustCompile(`^ccE-[A-Z2-7]{20}$`)
	devTokRE = regexp.MustCompile(`^ccd_[A-Za-z0-9_-]{43}$`)
	bearerRE = regexp.MustCompile(`^cct_tok_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$`)
	uuidRE   = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
)

// TestOpenRefusesWhatItCannotRead: a corrupt database and one written by a
// newer relay are refused with an error, and left as they were.
func TestOpenRefusesWhatItCannotRead(t *testing.T) {
	dir := t.TempDir()
	garbage := bytes.Repeat([]byte("not a database "), 400)
	if err := os.WriteFile(filepath.Join(dir, File), garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(dir); err == nil {
		s.Close()
		t.Fatal("a corrupt database was opened")
	}
	if after, _ := os.ReadFile(filepath.Join(dir, File)); !bytes.Equal(after, garbage) {
		t.Fatal("opening a corrupt database changed it")
	}

	newer := t.TempDir()
	s, err := Open(newer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err := Open(newer); err == nil {
		s.Close()
		t.Fatal("a database with a newer schema was opened")
	} else if !strings.Contains(err.Error(), "schema") {
		t.Fatalf("newer schema: %v", err)
	}
}

// A database written by a relay of schema 1 is brought up to date in place,
// keeping its tokens and devices.
func TestOpenMigratesSchemaOne(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	tok, _, err := s.CreateToken(TokenSpec{Name: "old", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	// Turn it back into a schema-1 database: drop what later schemas added.
	for _, q := range []string{
		`ALTER TABLE devices DROP COLUMN numbers_grants`,
		`ALTER TABLE devices DROP COLUMN agent_binary`,
		`ALTER TABLE devices DROP COLUMN user_manager`,
		`ALTER TABLE devices DROP COLUMN update_offer`,
		`DROP TABLE token_use`,
		`DROP TABLE oauth_tokens`,
		`DROP TABLE oauth_codes`,
		`DROP TABLE oauth_requests`,
		`DROP TABLE oauth_clients`,
		`ALTER TABLE tokens DROP COLUMN kind`,
		`ALTER TABLE tokens DROP COLUMN client_id`,
		`ALTER TABLE tokens DROP COLUMN client_name`,
		`ALTER TABLE tokens DROP COLUMN resource`,
		`ALTER TABLE tokens DROP COLUMN admin`,
		`ALTER TABLE audit DROP COLUMN job`,
		`DROP TABLE secret_prompts`,
		`ALTER TABLE devices DROP COLUMN binds_calls`,
		`DROP TABLE admins`,
		`DROP TABLE admin_codes`,
		`DROP TABLE panel_sessions`,
		`ALTER TABLE devices DROP COLUMN agent_version`,
		`ALTER TABLE devices DROP COLUMN linked_at`,
		`ALTER TABLE replicas DROP COLUMN panel`,
		`DROP INDEX devices_held_by`,
		`ALTER TABLE devices DROP COLUMN held_by`,
		`DROP TABLE replicas`,
		`DROP TABLE audit_refusals`,
		`DROP TRIGGER tokens_change_update`,
		`DROP TRIGGER tokens_change_delete`,
		`DROP TABLE token_changes`,
		`DROP TRIGGER devices_standing_insert`,
		`DROP TRIGGER devices_standing_delete`,
		`DROP TRIGGER devices_standing_update`,
		`DROP TABLE standing_changes`,
		`ALTER TABLE tokens DROP COLUMN principal`,
		`ALTER TABLE devices DROP COLUMN standing`,
		`ALTER TABLE devices DROP COLUMN standing_at`,
		`DROP TABLE retired_device_tokens`,
		`DROP TABLE audit`,
		`PRAGMA user_version = 1`,
	} {
		if _, err := s.db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	s, err = Open(dir)
	if err != nil {
		t.Fatalf("open a schema-1 database: %v", err)
	}
	defer s.Close()
	var version int
	if err := s.db.QueryRow("PRAGMA user_version").Scan(&version); err != nil || version != SchemaVersion {
		t.Fatalf("user_version %d %v", version, err)
	}
	list, err := s.Tokens()
	if err != nil || len(list) != 1 || list[0].ID != tok.ID {
		t.Fatalf("tokens after migration: %+v %v", list, err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM audit`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("audit table after migration: %d %v", n, err)
	}
	// The standing-change counter works on a migrated database.
	before := changes(t, s)
	enrollT(t, s, "migrated", "")
	if after := changes(t, s); after == before {
		t.Fatalf("an enrollment left the counter at %d after migration", after)
	}
	// So does the token-change counter.
	before = tokenChanges(t, s)
	if err := s.RevokeToken(tok.ID, now); err != nil {
		t.Fatal(err)
	}
	if after := tokenChanges(t, s); after == before {
		t.Fatalf("a revocation left the token counter at %d after migration", after)
	}
	// And the refusal counts.
	if err := s.AddRefusalCounts([]RefusalCount{{Minute: now.Truncate(time.Minute), Source: "192.0.2.1", Count: 2}}, now); err != nil {
		t.Fatalf("refusal counts after migration: %v", err)
	}
	// And the replicas and the links they hold.
	if err := s.JoinReplica(Replica{ID: "r1", Name: "relay"}, now); err != nil {
		t.Fatalf("a replica after migration: %v", err)
	}
}

// TestPublicURLRecorded: no public URL until one is recorded; the last
// recorded wins, for every store on the database and across a reopen; an
// empty one clears it; one past the bound is refused and changes nothing.
func TestPublicURLRecorded(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		dir := newPlace(t)
		a, b := openT(t, dir), openT(t, dir)
		if u, err := a.PublicURL(); err != nil || u != "" {
			t.Fatalf("before any: %q, %v", u, err)
		}
		for _, u := range []string{"https://relay.example", "https://relay.example:8440"} {
			if err := a.SetPublicURL(u); err != nil {
				t.Fatal(err)
			}
			if got, err := b.PublicURL(); err != nil || got != u {
				t.Fatalf("the other store reads %q, %v; want %q", got, err, u)
			}
		}
		long := "https://" + strings.Repeat("a", maxAuditText-len("https://")+1)
		if err := a.SetPublicURL(long); !errcode.Is(err, errcode.InvalidArgument) {
			t.Fatalf("a URL of %d bytes: %v", len(long), err)
		}
		a.Close()
		c := openT(t, dir)
		if got, err := c.PublicURL(); err != nil || got != "https://relay.example:8440" {
			t.Fatalf("after a reopen: %q, %v", got, err)
		}
		if err := c.SetPublicURL(strings.Repeat("a", maxAuditText)); err != nil {
			t.Fatalf("a URL at the bound: %v", err)
		}
		if err := c.SetPublicURL(""); err != nil {
			t.Fatal(err)
		}
		if got, err := b.PublicURL(); err != nil || got != "" {
			t.Fatalf("cleared: %q, %v", got, err)
		}
	})
}
