package store

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
)

func mustToken(t *testing.T, s *Store, name string, ttl time.Duration, now time.Time) (*Token, string) {
	t.Helper()
	tok, bearer, err := s.CreateToken(TokenSpec{Name: name, Devices: []string{"*"}, Tools: []string{"*"}, TTL: ttl}, now)
	if err != nil {
		t.Fatal(err)
	}
	return tok, bearer
}

func TestCreateAndAuthToken(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		tok, bearer, err := s.CreateToken(TokenSpec{Name: "ci", Devices: []string{"laptop", "*", "laptop"}, Tools: []string{"process.*", "system.metrics"}, TTL: time.Hour}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if !bearerRE.MatchString(bearer) || !strings.HasPrefix(bearer, "cct_"+tok.ID+"_") {
			t.Fatalf("bearer has the wrong format (len %d)", len(bearer))
		}
		// Without --principal, a token is its own principal.
		want := &Token{ID: tok.ID, Name: "ci", Devices: []string{"laptop", "*"}, Tools: []string{"process.*", "system.metrics"},
			Principal: tok.ID, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), Kind: TokenStatic}
		if !reflect.DeepEqual(tok, want) {
			t.Fatalf("CreateToken = %+v, want %+v", tok, want)
		}
		got, err := s.AuthToken(bearer, t0.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("AuthToken = %+v, want %+v", got, want)
		}
		js, _ := json.Marshal(got)
		if strings.Contains(string(js), "revoked_at") || !strings.Contains(string(js), `"devices":["laptop","*"]`) {
			t.Fatalf("JSON %s", js)
		}
	})
}

func TestTokensShareANamedPrincipal(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		spec := TokenSpec{Name: "ci", Devices: []string{"*"}, Tools: []string{"*"}, Principal: "ci-bot", TTL: time.Hour}
		a, bearerA, err := s.CreateToken(spec, t0)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := s.CreateToken(spec, t0)
		if err != nil {
			t.Fatal(err)
		}
		if a.ID == b.ID || a.Principal != "ci-bot" || b.Principal != "ci-bot" {
			t.Fatalf("tokens %s/%s, principals %q/%q", a.ID, b.ID, a.Principal, b.Principal)
		}
		got, err := s.AuthToken(bearerA, t0)
		if err != nil || got.Principal != "ci-bot" {
			t.Fatalf("AuthToken principal %q, %v", got.Principal, err)
		}
		list, err := s.Tokens()
		if err != nil || len(list) != 2 || list[0].Principal != "ci-bot" || list[1].Principal != "ci-bot" {
			t.Fatalf("Tokens = %+v, %v", list, err)
		}
		for _, bad := range []string{"local", "Local", "a b", "a/b", strings.Repeat("p", 65)} {
			spec.Principal = bad
			if _, _, err := s.CreateToken(spec, t0); errcode.From(err).Code != errcode.InvalidArgument {
				t.Errorf("principal %q: %v", bad, err)
			}
		}
	})
}

func TestCreateTokenValidation(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		all := []string{"*"}
		cases := []struct {
			name           string
			devices, tools []string
			ttl            time.Duration
		}{
			{"n", nil, all, time.Hour},
			{"n", []string{}, all, time.Hour},
			{"n", all, nil, time.Hour},
			{"n", all, []string{}, time.Hour},
			{"n", all, all, 0},
			{"n", all, all, -time.Hour},
			{"n", all, all, time.Duration(math.MaxInt64)},
			{"", all, all, time.Hour},
			{"a b", all, all, time.Hour},
			{strings.Repeat("x", 65), all, all, time.Hour},
			{"n", []string{""}, all, time.Hour},
			{"n", []string{"a,b"}, all, time.Hour},
			{"n", []string{"dev.*"}, all, time.Hour},
			{"n", all, []string{""}, time.Hour},
			{"n", all, []string{".*"}, time.Hour},
			{"n", all, []string{"*.*"}, time.Hour},
			{"n", all, []string{"process *"}, time.Hour},
			{"n", make([]string, MaxScopeEntries+1), all, time.Hour},
		}
		for i, c := range cases {
			_, bearer, err := s.CreateToken(TokenSpec{Name: c.name, Devices: c.devices, Tools: c.tools, TTL: c.ttl}, t0)
			if !errcode.Is(err, errcode.InvalidArgument) || bearer != "" {
				t.Fatalf("case %d: %v, want invalid_argument", i, err)
			}
		}
		if toks, _ := s.Tokens(); len(toks) != 0 {
			t.Fatalf("refused tokens were stored: %v", toks)
		}
	})
}

func TestAuthTokenExpired(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		_, bearer := mustToken(t, s, "a", time.Hour, t0)
		if _, err := s.AuthToken(bearer, t0.Add(time.Hour-time.Nanosecond)); err != nil {
			t.Fatalf("refused before expiry: %v", err)
		}
		for _, now := range []time.Time{t0.Add(time.Hour), t0.Add(48 * time.Hour)} {
			_, err := s.AuthToken(bearer, now)
			wantCode(t, err, errcode.PermissionDenied)
			if err.(*errcode.Error).Message != "client token is invalid, expired or revoked" {
				t.Fatalf("message %q", err.(*errcode.Error).Message)
			}
		}
	})
}

func TestRevokeThroughAnotherStore(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		dir := newPlace(t)
		server, cli := openT(t, dir), openT(t, dir) // as two processes
		tok, bearer := mustToken(t, cli, "a", time.Hour, t0)
		other, otherBearer := mustToken(t, cli, "b", time.Hour, t0)
		if _, err := server.AuthToken(bearer, t0); err != nil {
			t.Fatalf("server cannot see a token the CLI created: %v", err)
		}
		if err := cli.RevokeToken(tok.ID, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		_, err := server.AuthToken(bearer, t0.Add(2*time.Minute))
		wantCode(t, err, errcode.PermissionDenied)
		// Revoked is refused even at a time before the revocation.
		_, err = server.AuthToken(bearer, t0)
		wantCode(t, err, errcode.PermissionDenied)
		if _, err := server.AuthToken(otherBearer, t0.Add(2*time.Minute)); err != nil {
			t.Fatalf("revoking one token refused another: %v", err)
		}
		// Idempotent: a second revoke succeeds and keeps the first time.
		if err := server.RevokeToken(tok.ID, t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		toks, err := server.Tokens()
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range toks {
			switch tk.ID {
			case tok.ID:
				if tk.RevokedAt == nil || !tk.RevokedAt.Equal(t0.Add(time.Minute)) {
					t.Fatalf("revoked_at %v, want the first revocation", tk.RevokedAt)
				}
			case other.ID:
				if tk.RevokedAt != nil {
					t.Fatal("the other token is revoked")
				}
			}
		}
		wantCode(t, cli.RevokeToken("tok_000000000000", t0), errcode.NotFound)
		wantCode(t, cli.RevokeToken("", t0), errcode.NotFound)
		wantCode(t, cli.RevokeToken(bearer, t0), errcode.NotFound)
	})
}

func tokenChanges(t *testing.T, s *Store) int64 {
	t.Helper()
	n, err := s.TokenChanges()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTokenChangesFollowValidity: the token-change counter moves with
// every write that can change whether a token is accepted, by this Store,
// another one on the database (another process) or the sqlite3 shell; and
// stays put under creating and checking tokens and the relay's other
// writes, so a relay's remembered checks survive them.
func TestTokenChangesFollowValidity(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		dir := newPlace(t)
		relay, cli := openT(t, dir), openT(t, dir) // as two processes
		a, _ := mustToken(t, cli, "a", time.Hour, t0)
		b, _ := mustToken(t, cli, "b", time.Hour, t0)
		c, _ := mustToken(t, cli, "c", time.Hour, t0)
		_, liveBearer := mustToken(t, cli, "live", time.Hour, t0)
		moves := []struct {
			what string
			do   func() error
		}{
			{"a revocation by another Store", func() error { return cli.RevokeToken(a.ID, t0) }},
			{"a second revocation", func() error { return relay.RevokeToken(a.ID, t0) }},
			{"an expiry moved by the shell", func() error {
				_, err := cli.db.Exec(`UPDATE tokens SET expires_at = ? WHERE id = ?`, t0.UnixNano(), b.ID)
				return err
			}},
			{"a scope changed by the shell", func() error {
				_, err := cli.db.Exec(`UPDATE tokens SET tools = '["system.metrics"]' WHERE id = ?`, c.ID)
				return err
			}},
			{"a deletion by the shell", func() error {
				_, err := cli.db.Exec(`DELETE FROM tokens WHERE id = ?`, c.ID)
				return err
			}},
		}
		for _, m := range moves {
			before := tokenChanges(t, relay)
			if err := m.do(); err != nil {
				t.Fatalf("%s: %v", m.what, err)
			}
			if after := tokenChanges(t, relay); after == before {
				t.Errorf("%s left the counter at %d", m.what, after)
			}
		}
		stays := []struct {
			what string
			do   func() error
		}{
			{"a new token", func() error {
				_, _, err := cli.CreateToken(TokenSpec{Name: "d", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, t0)
				return err
			}},
			{"a check", func() error { _, err := relay.AuthToken(liveBearer, t0); return err }},
			{"an audit entry", func() error {
				return relay.AppendAudit([]AuditEntry{{At: t0, Tool: "unknown", Outcome: AuditOK}}, t0)
			}},
			{"an enrollment", func() error { enrollT(t, relay, "dev", ""); return nil }},
		}
		for _, s := range stays {
			before := tokenChanges(t, relay)
			if err := s.do(); err != nil {
				t.Fatalf("%s: %v", s.what, err)
			}
			if after := tokenChanges(t, relay); after != before {
				t.Errorf("%s moved the counter from %d to %d", s.what, before, after)
			}
		}
	})
}

func TestTokensNewestFirst(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		if toks, err := s.Tokens(); err != nil || toks == nil || len(toks) != 0 {
			t.Fatalf("Tokens() = %#v, %v; want empty non-nil", toks, err)
		}
		var ids []string
		for i, name := range []string{"first", "second", "third", "fourth"} {
			now := t0.Add(time.Duration(i) * time.Minute)
			if name == "fourth" {
				now = t0.Add(2 * time.Minute) // same time as third: insertion order breaks the tie
			}
			tok, _ := mustToken(t, s, name, time.Hour, now)
			ids = append([]string{tok.ID}, ids...)
		}
		toks, err := s.Tokens()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, tk := range toks {
			got = append(got, tk.ID)
		}
		if !reflect.DeepEqual(got, ids) {
			t.Fatalf("Tokens() order %v, want %v", got, ids)
		}
	})
}

func TestAuthTokenMalformed(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		tok, bearer := mustToken(t, s, "a", time.Hour, t0)
		other, otherBearer := mustToken(t, s, "b", time.Hour, t0)
		secretPart := bearer[len(bearer)-43:]
		bad := []string{
			"",
			"cct_",
			"Bearer " + bearer,
			strings.Replace(bearer, "cct_", "ccd_", 1),
			strings.Replace(bearer, "cct_", "CCT_", 1),
			bearer[:len(bearer)-1],
			bearer + "A",
			bearer + "\n",
			" " + bearer[1:],
			strings.ToUpper(bearer),
			flipAt(bearer, len(bearer)-43),       // wrong secret, right id
			"cct_" + other.ID + "_" + secretPart, // one token's secret with another's id
			"cct_" + tok.ID + "_" + otherBearer[len(otherBearer)-43:],
			"cct_tok_zzzzzzzzzzzz_" + secretPart,          // id not hex
			"cct_tok_ABCDEF012345_" + secretPart,          // id not lower-case
			"cct_" + tok.ID + "-" + secretPart,            // wrong separator
			"cct_" + tok.ID + "_" + secretPart[:42] + "=", // padding
			"cct_" + tok.ID + "_" + secretPart[:42] + "\xff",
			"cct_" + tok.ID + "_" + strings.Repeat("\xff", 43),
			strings.Repeat("a", 1<<20),
			"cct_" + tok.ID + "_" + strings.Repeat("A", 1<<20),
			bearer[:20] + "\x00" + bearer[21:],
		}
		for i, b := range bad {
			got, err := s.AuthToken(b, t0)
			if got != nil || !errcode.Is(err, errcode.PermissionDenied) {
				t.Fatalf("case %d: AuthToken = %v, %v; want permission_denied", i, got, err)
			}
			if err.(*errcode.Error).Message != "client token is invalid, expired or revoked" {
				t.Fatalf("case %d: message %q", i, err.(*errcode.Error).Message)
			}
		}
		// The real ones still work: the malformed tries changed nothing.
		if _, err := s.AuthToken(bearer, t0); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTokenSecretsDiffer(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		seen := map[string]bool{}
		for range 20 {
			tok, bearer := mustToken(t, s, "a", time.Hour, t0)
			if seen[tok.ID] || seen[bearer] {
				t.Fatal("repeated token ID or bearer")
			}
			seen[tok.ID], seen[bearer] = true, true
		}
	})
}

func TestTokenScopeKeepsDeviceIDsLowerCase(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		const id = "7C9E6679-7425-40DE-944B-E07FC1F90AE7"
		tok, _, err := s.CreateToken(TokenSpec{Name: "a", Devices: []string{id, "laptop"}, Tools: []string{"*"}, TTL: time.Hour}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(tok.Devices, []string{strings.ToLower(id), "laptop"}) {
			t.Fatalf("devices %v", tok.Devices)
		}
	})
}
