package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// challenge is a well-formed S256 challenge (43 base64url characters).
const challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"

func requestT(t *testing.T, s *Store) string {
	t.Helper()
	id, err := s.CreateAuthRequest(AuthRequest{ClientID: "https://client.example/meta.json", ClientName: "Claude",
		RedirectURI: "https://client.example/cb", State: "st-1", Challenge: challenge,
		Resource: "https://relay.example/mcp/build-box", Scope: "read run"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

var specT = ConnectionSpec{Devices: []string{"build-box"}, Tools: []string{"process.jobs", "process.status"},
	Principal: "alice", TTL: 7 * 24 * time.Hour, Admin: "alice"}

// connectT goes from a new request to a connection and its first pair.
func connectT(t *testing.T, s *Store) (*Token, TokenPair) {
	t.Helper()
	code, _, err := s.ApproveAuthRequest(requestT(t, s), specT, t0)
	if err != nil {
		t.Fatal(err)
	}
	tok, pair, err := s.RedeemAuthCode(code, func(*AuthCode) error { return nil }, t0)
	if err != nil {
		t.Fatal(err)
	}
	return tok, pair
}

// TestAConsentBecomesAConnection: the request waits for consent, the
// code stands for exactly what was allowed, and its access token opens
// the connection: its scopes, principal, resource and an hour's life.
func TestAConsentBecomesAConnection(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		id := requestT(t, s)
		if !validRequestID(id) {
			t.Fatalf("request ID %q", id)
		}
		req, err := s.AuthRequest(id, t0)
		if err != nil || req.ClientName != "Claude" || req.State != "st-1" || req.Scope != "read run" ||
			!req.ExpiresAt.Equal(t0.Add(limits.OAuthRequestTTL)) {
			t.Fatalf("AuthRequest = %+v, %v", req, err)
		}
		_, err = s.AuthRequest(id, t0.Add(limits.OAuthRequestTTL))
		wantCode(t, err, errcode.NotFound)

		code, answered, err := s.ApproveAuthRequest(id, specT, t0)
		if err != nil || answered.RedirectURI != "https://client.example/cb" || !strings.HasPrefix(code, "cac_") {
			t.Fatalf("Approve = %q, %+v, %v", code, answered, err)
		}
		_, _, err = s.ApproveAuthRequest(id, specT, t0)
		wantCode(t, err, errcode.NotFound)
		_, err = s.DenyAuthRequest(id, t0)
		wantCode(t, err, errcode.NotFound)

		var seen *AuthCode
		tok, pair, err := s.RedeemAuthCode(code, func(c *AuthCode) error { seen = c; return nil }, t0.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if seen.Challenge != challenge || seen.RedirectURI != "https://client.example/cb" || seen.Resource != "https://relay.example/mcp/build-box" ||
			!slices.Equal(seen.Spec.Tools, specT.Tools) || seen.Spec.TTL != specT.TTL {
			t.Fatalf("the code stands for %+v", seen)
		}
		if tok.Kind != TokenOAuth || tok.Client != "Claude" || tok.Principal != "alice" || tok.Admin != "alice" ||
			!tok.ExpiresAt.Equal(t0.Add(time.Second+specT.TTL)) {
			t.Fatalf("connection %+v", tok)
		}
		if !strings.HasPrefix(pair.Access, "cca_"+tok.ID+"_") || !strings.HasPrefix(pair.Refresh, "ccr_"+tok.ID+"_") ||
			!pair.AccessExpiresAt.Equal(t0.Add(time.Second+limits.OAuthAccessTTL)) {
			t.Fatalf("pair %+v", pair)
		}
		got, err := s.AuthToken(pair.Access, t0.Add(time.Minute))
		if err != nil || got.ID != tok.ID || got.Resource != "https://relay.example/mcp/build-box" ||
			!slices.Equal(got.Devices, []string{"build-box"}) || !got.ExpiresAt.Equal(pair.AccessExpiresAt) {
			t.Fatalf("AuthToken(access) = %+v, %v", got, err)
		}
		_, err = s.AuthToken(pair.Access, pair.AccessExpiresAt)
		wantCode(t, err, errcode.PermissionDenied)
		// A refresh token is no access token, and a connection has no
		// static bearer.
		_, err = s.AuthToken(pair.Refresh, t0)
		wantCode(t, err, errcode.PermissionDenied)
		_, err = s.AuthToken("cct_"+tok.ID+"_"+pair.Access[len(pair.Access)-43:], t0)
		wantCode(t, err, errcode.PermissionDenied)

		list, err := s.Tokens()
		if err != nil || len(list) != 1 || list[0].Kind != TokenOAuth || list[0].ClientID != "https://client.example/meta.json" || list[0].Name != "Claude" {
			t.Fatalf("Tokens = %+v, %v", list, err)
		}
	})
}

// TestACodeIsSpentOnce: the second presentation is refused and revokes
// the connection the first made; a code verify refused is spent too; an
// expired one makes nothing.
func TestACodeIsSpentOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		code, _, err := s.ApproveAuthRequest(requestT(t, s), specT, t0)
		if err != nil {
			t.Fatal(err)
		}
		ok := func(*AuthCode) error { return nil }
		_, pair, err := s.RedeemAuthCode(code, ok, t0)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.RedeemAuthCode(code, ok, t0); !errors.Is(err, ErrCodeReused) {
			t.Fatalf("second use: %v", err)
		}
		_, err = s.AuthToken(pair.Access, t0)
		wantCode(t, err, errcode.PermissionDenied)

		code, _, _ = s.ApproveAuthRequest(requestT(t, s), specT, t0)
		bad := errors.New("verifier does not match")
		if _, _, err := s.RedeemAuthCode(code, func(*AuthCode) error { return bad }, t0); err != bad {
			t.Fatalf("refused verify: %v", err)
		}
		if _, _, err := s.RedeemAuthCode(code, ok, t0); !errors.Is(err, ErrCodeReused) {
			t.Fatalf("a code verify refused was not spent: %v", err)
		}

		code, _, _ = s.ApproveAuthRequest(requestT(t, s), specT, t0)
		_, _, err = s.RedeemAuthCode(code, ok, t0.Add(limits.OAuthCodeTTL))
		wantCode(t, err, errcode.PermissionDenied)
		_, _, err = s.RedeemAuthCode("cac_"+strings.Repeat("A", 43), ok, t0)
		wantCode(t, err, errcode.PermissionDenied)
		_, _, err = s.RedeemAuthCode("not a code", ok, t0)
		wantCode(t, err, errcode.PermissionDenied)
		if list, _ := s.Tokens(); len(list) != 1 || list[0].RevokedAt == nil {
			t.Fatalf("connections: %+v (want the one, revoked)", list)
		}
	})
}

// TestRefreshRotatesAndAReuseRevokes: each refresh spends its token and
// gives a new pair; the spent one presented again ends the connection,
// new pair included; another client's refresh is refused.
func TestRefreshRotatesAndAReuseRevokes(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		tok, first := connectT(t, s)
		_, _, err := s.RefreshConnection(first.Refresh, "https://other.example/meta.json", t0)
		wantCode(t, err, errcode.PermissionDenied)
		at := t0.Add(2 * time.Hour)
		got, second, err := s.RefreshConnection(first.Refresh, tok.ClientID, at)
		if err != nil || got.ID != tok.ID || second.Refresh == first.Refresh || !second.AccessExpiresAt.Equal(at.Add(limits.OAuthAccessTTL)) {
			t.Fatalf("refresh = %+v, %+v, %v", got, second, err)
		}
		if _, err := s.AuthToken(second.Access, at); err != nil {
			t.Fatalf("the new access token: %v", err)
		}
		// At the grace's end, a reuse.
		late := at.Add(limits.OAuthRefreshGrace)
		if _, _, err := s.RefreshConnection(first.Refresh, tok.ClientID, late); !errors.Is(err, ErrRefreshReused) {
			t.Fatalf("reuse: %v", err)
		}
		_, err = s.AuthToken(second.Access, late)
		wantCode(t, err, errcode.PermissionDenied)
		_, _, err = s.RefreshConnection(second.Refresh, tok.ClientID, late)
		wantCode(t, err, errcode.PermissionDenied)
		_, _, err = s.RefreshConnection("ccr_garbage", tok.ClientID, at)
		wantCode(t, err, errcode.PermissionDenied)
	})
}

// TestARefreshIsAcceptedOnceMoreWithinItsGrace: a client that refreshed
// twice at once, or retried after a lost answer, presents the same refresh
// token again within limits.OAuthRefreshGrace (30 s): it gets a pair of its
// own, the first use's pair stays good, and the connection lives on. A
// third presentation revokes the connection, as a reuse after the grace
// does.
func TestARefreshIsAcceptedOnceMoreWithinItsGrace(t *testing.T) {
	if limits.OAuthRefreshGrace != 30*time.Second {
		t.Fatalf("the refresh grace is %v; the contract says 30 s", limits.OAuthRefreshGrace)
	}
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		tok, first := connectT(t, s)
		at := t0.Add(2 * time.Hour)
		_, a, err := s.RefreshConnection(first.Refresh, tok.ClientID, at)
		if err != nil {
			t.Fatal(err)
		}
		again := at.Add(limits.OAuthRefreshGrace - time.Millisecond)
		got, b, err := s.RefreshConnection(first.Refresh, tok.ClientID, again)
		if err != nil || got.ID != tok.ID || b.Refresh == a.Refresh || b.Access == a.Access {
			t.Fatalf("within the grace: %+v %+v %v", got, b, err)
		}
		for _, p := range []TokenPair{a, b} {
			if _, err := s.AuthToken(p.Access, again); err != nil {
				t.Fatalf("an access token after the grace's use: %v", err)
			}
		}
		// Each pair goes on rotating on its own.
		if _, _, err := s.RefreshConnection(a.Refresh, tok.ClientID, again); err != nil {
			t.Fatalf("the first use's refresh token: %v", err)
		}
		if _, _, err := s.RefreshConnection(first.Refresh, tok.ClientID, again); !errors.Is(err, ErrRefreshReused) {
			t.Fatalf("a third presentation within the grace: %v", err)
		}
		_, err = s.AuthToken(b.Access, again)
		wantCode(t, err, errcode.PermissionDenied)
	})
}

// TestAConnectionEndsWithItsLifetime: no refresh after the lifetime the
// person chose, and an access token never outlives it.
func TestAConnectionEndsWithItsLifetime(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		spec := specT
		spec.TTL = 30 * time.Minute
		code, _, _ := s.ApproveAuthRequest(requestT(t, s), spec, t0)
		tok, pair, err := s.RedeemAuthCode(code, func(*AuthCode) error { return nil }, t0)
		if err != nil || !pair.AccessExpiresAt.Equal(t0.Add(30*time.Minute)) {
			t.Fatalf("pair %+v, %v (the access token outlives the connection)", pair, err)
		}
		_, _, err = s.RefreshConnection(pair.Refresh, tok.ClientID, t0.Add(30*time.Minute))
		wantCode(t, err, errcode.PermissionDenied)
	})
}

// TestRevocationEndsBothTokens: RFC 7009's revocation of either token,
// and `relay token revoke`, end the connection; unknown tokens are no
// error; revocation moves the token-change counter the relay's cache
// watches.
func TestRevocationEndsBothTokens(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		tok, pair := connectT(t, s)
		before, _ := s.TokenChanges()
		got, err := s.RevokeOAuthToken(pair.Refresh, t0)
		if err != nil || got == nil || got.ID != tok.ID || got.Principal != tok.Principal || got.Principal == "" {
			t.Fatalf("revoke = %+v, %v; want the connection %s of %s", got, err, tok.ID, tok.Principal)
		}
		if after, _ := s.TokenChanges(); after == before {
			t.Fatal("revocation did not move the token-change counter")
		}
		_, err = s.AuthToken(pair.Access, t0)
		wantCode(t, err, errcode.PermissionDenied)

		tok, pair = connectT(t, s)
		if got, err := s.RevokeOAuthToken(pair.Access, t0); err != nil || got == nil || got.ID != tok.ID {
			t.Fatalf("revoke access = %+v, %v", got, err)
		}
		_, _, err = s.RefreshConnection(pair.Refresh, tok.ClientID, t0)
		wantCode(t, err, errcode.PermissionDenied)

		tok, pair = connectT(t, s)
		if err := s.RevokeToken(tok.ID, t0); err != nil {
			t.Fatal(err)
		}
		_, err = s.AuthToken(pair.Access, t0)
		wantCode(t, err, errcode.PermissionDenied)

		for _, unknown := range []string{"", "cca_tok_000000000000_" + strings.Repeat("A", 43), pair.Access[:len(pair.Access)-1] + "B", "garbage"} {
			if got, err := s.RevokeOAuthToken(unknown, t0); err != nil || got != nil {
				t.Errorf("revoke %q = %+v, %v", unknown, got, err)
			}
		}
	})
}

// TestConsentRefusesWhatNoConnectionMayBe: an admin's principal, no
// device, no tool, no lifetime or a longer one than allowed.
func TestConsentRefusesWhatNoConnectionMayBe(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		id := requestT(t, s)
		for _, mut := range []func(*ConnectionSpec){
			func(c *ConnectionSpec) { c.Principal = "admin:alice" },
			func(c *ConnectionSpec) { c.Principal = "" },
			func(c *ConnectionSpec) { c.Principal = "local" },
			func(c *ConnectionSpec) { c.Devices = nil },
			func(c *ConnectionSpec) { c.Tools = []string{"bad tool"} },
			func(c *ConnectionSpec) { c.TTL = 0 },
			func(c *ConnectionSpec) { c.TTL = limits.OAuthConnectionMax + time.Second },
			func(c *ConnectionSpec) { c.Admin = "" },
		} {
			spec := specT
			mut(&spec)
			_, _, err := s.ApproveAuthRequest(id, spec, t0)
			wantCode(t, err, errcode.InvalidArgument)
		}
		// None of them answered the request.
		if _, err := s.AuthRequest(id, t0); err != nil {
			t.Fatalf("a refused consent answered the request: %v", err)
		}
		spec := specT
		spec.TTL = limits.OAuthConnectionMax
		spec.Devices = []string{"B9E1A0C2-56F4-4C7E-9D0B-2F6A7C1E3D48", "build-box", "build-box"}
		code, _, err := s.ApproveAuthRequest(id, spec, t0)
		if err != nil {
			t.Fatal(err)
		}
		tok, _, err := s.RedeemAuthCode(code, func(*AuthCode) error { return nil }, t0)
		if err != nil || !slices.Equal(tok.Devices, []string{"b9e1a0c2-56f4-4c7e-9d0b-2f6a7c1e3d48", "build-box"}) {
			t.Fatalf("devices %v, %v (want IDs lower case, duplicates dropped)", tok.Devices, err)
		}
	})
}

// TestADeniedRequestIsAnswered: Deny answers once, and the request is
// gone for Approve.
func TestADeniedRequestIsAnswered(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		id := requestT(t, s)
		req, err := s.DenyAuthRequest(id, t0)
		if err != nil || req.State != "st-1" {
			t.Fatalf("Deny = %+v, %v", req, err)
		}
		_, _, err = s.ApproveAuthRequest(id, specT, t0)
		wantCode(t, err, errcode.NotFound)
		_, err = s.DenyAuthRequest("car_nope", t0)
		wantCode(t, err, errcode.NotFound)
	})
}

// TestAuthRequestsKeepOnlyPrintableBoundedText: what a client sends is
// refused before it is kept when it could upset a page or a terminal.
func TestAuthRequestsKeepOnlyPrintableBoundedText(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		good := AuthRequest{ClientID: "c", RedirectURI: "https://c/cb", Challenge: challenge, Resource: "https://r/mcp"}
		for _, mut := range []func(*AuthRequest){
			func(r *AuthRequest) { r.Challenge = "short" },
			func(r *AuthRequest) { r.Challenge = strings.Repeat("+", 43) },
			func(r *AuthRequest) { r.RedirectURI = "" },
			func(r *AuthRequest) { r.Resource = "" },
			func(r *AuthRequest) { r.ClientID = "" },
			func(r *AuthRequest) { r.State = "a\x1bb" },
			func(r *AuthRequest) { r.ClientName = "evil\u202ename" },
			func(r *AuthRequest) { r.Scope = strings.Repeat("x", MaxOAuthTextBytes+1) },
		} {
			r := good
			mut(&r)
			_, err := s.CreateAuthRequest(r, t0)
			wantCode(t, err, errcode.InvalidArgument)
		}
		if _, err := s.CreateAuthRequest(good, t0); err != nil {
			t.Fatal(err)
		}
	})
}

// TestUnusedRegistrationsExpire: a dynamic registration is found until
// it has gone unused for its TTL; one an authorization used stays.
func TestUnusedRegistrationsExpire(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		c, err := s.RegisterClient(OAuthClient{Name: "ChatGPT", RedirectURIs: []string{"https://chatgpt.com/cb"}}, t0)
		if err != nil || !IsRegisteredClientID(c.ID) {
			t.Fatalf("Register = %+v, %v", c, err)
		}
		got, err := s.RegisteredClient(c.ID, t0.Add(limits.OAuthUnusedClientTTL-time.Second))
		if err != nil || got.Name != "ChatGPT" || !slices.Equal(got.RedirectURIs, []string{"https://chatgpt.com/cb"}) || !got.CreatedAt.Equal(t0) {
			t.Fatalf("RegisteredClient = %+v, %v", got, err)
		}
		_, err = s.RegisteredClient(c.ID, t0.Add(limits.OAuthUnusedClientTTL))
		wantCode(t, err, errcode.NotFound)

		used, _ := s.RegisterClient(OAuthClient{RedirectURIs: []string{"http://127.0.0.1/cb"}}, t0)
		id, err := s.CreateAuthRequest(AuthRequest{ClientID: used.ID, RedirectURI: "http://127.0.0.1/cb", Challenge: challenge, Resource: "https://r/mcp"}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.ApproveAuthRequest(id, specT, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RegisteredClient(used.ID, t0.Add(2*limits.OAuthUnusedClientTTL)); err != nil {
			t.Fatalf("a used registration expired: %v", err)
		}
		// A later registration sweeps the expired, unused one away.
		if _, err := s.RegisterClient(OAuthClient{RedirectURIs: []string{"https://x/cb"}}, t0.Add(2*limits.OAuthUnusedClientTTL)); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM oauth_clients WHERE id = ?`, c.ID).Scan(&n); err != nil || n != 0 {
			t.Fatalf("the unused registration is still kept: %d, %v", n, err)
		}
		for _, bad := range []OAuthClient{{}, {RedirectURIs: make([]string, limits.OAuthMaxRedirectURIs+1)},
			{RedirectURIs: []string{""}}, {Name: "a\x00b", RedirectURIs: []string{"https://x/cb"}}} {
			_, err := s.RegisterClient(bad, t0)
			wantCode(t, err, errcode.InvalidArgument)
		}
		_, err = s.RegisteredClient("https://client.example/meta.json", t0)
		wantCode(t, err, errcode.NotFound)
	})
}

// TestLastUsedIsTheLastAuditedCall: Tokens reports each token's latest
// audited call, whichever batch it came in.
func TestLastUsedIsTheLastAuditedCall(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		tok, _ := connectT(t, s)
		static, _, err := s.CreateToken(TokenSpec{Name: "ci", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, t0)
		if err != nil {
			t.Fatal(err)
		}
		entry := func(id string, at time.Time) AuditEntry {
			return AuditEntry{At: at, Principal: "alice", TokenID: id, Tool: "process.jobs", Outcome: AuditOK}
		}
		if err := s.AppendAudit([]AuditEntry{entry(tok.ID, t0.Add(3*time.Second)), entry(tok.ID, t0.Add(time.Second))}, t0); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendAudit([]AuditEntry{entry(tok.ID, t0.Add(2*time.Second))}, t0); err != nil {
			t.Fatal(err)
		}
		list, err := s.Tokens()
		if err != nil || len(list) != 2 {
			t.Fatalf("Tokens = %+v, %v", list, err)
		}
		for _, got := range list {
			switch got.ID {
			case tok.ID:
				if got.LastUsedAt == nil || !got.LastUsedAt.Equal(t0.Add(3*time.Second)) {
					t.Errorf("last used %v, want the latest call's time", got.LastUsedAt)
				}
			case static.ID:
				if got.LastUsedAt != nil || got.Kind != TokenStatic {
					t.Errorf("static token %+v: never used, kind static", got)
				}
			}
		}
	})
}

func TestConnectionNamesAreTokenNames(t *testing.T) {
	for in, want := range map[string]string{"Claude": "Claude", "ChatGPT Connector": "ChatGPT-Connector", "": "oauth",
		"é": "-", strings.Repeat("a", 200): strings.Repeat("a", MaxNameBytes)} {
		if got := connectionName(in); got != want || !ValidName(got) {
			t.Errorf("connectionName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAnAuthorizationFloodHoldsABoundedShare: GET /authorize needs no
// credential, and each request with a known client wrote a row of up to
// about 4 KB kept for a day: 4,000 requests grew the state by 22 MB. Now a
// flood from one address holds at most OAuthPendingPerSource rows, one
// client's at most OAuthPendingPerClient, everyone's at most
// OAuthPendingMax, each removed at its expiry; and a person's request from
// another address is served during the flood, on both engines.
func TestAnAuthorizationFloodHoldsABoundedShare(t *testing.T) {
	if limits.OAuthPendingPerSource != 16 || limits.OAuthPendingPerClient != 64 || limits.OAuthPendingMax != 1024 || limits.OAuthStateMaxBytes != 1024 {
		t.Fatal("the pending requests' bounds are not the documented 16, 64, 1024 and a 1,024-byte state")
	}
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		big := strings.Repeat("s", limits.OAuthStateMaxBytes)
		flood := func(n int, source, client string) (refused int) {
			t.Helper()
			for range n {
				_, err := s.CreateAuthRequest(AuthRequest{ClientID: client, RedirectURI: "https://attacker.example/" + strings.Repeat("r", 1900),
					State: big, Challenge: challenge, Resource: "https://relay.example/mcp", Source: source}, t0)
				switch {
				case errors.Is(err, ErrPendingFull):
					refused++
				case err != nil:
					t.Fatal(err)
				}
			}
			return refused
		}
		rows := func() int {
			var n int
			if err := s.db.QueryRow(`SELECT count(*) FROM oauth_requests`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		// One address, one client: 2,000 requests, 16 kept.
		if refused := flood(2000, "198.51.100.7", "ccc_attacker"); refused != 2000-limits.OAuthPendingPerSource || rows() != limits.OAuthPendingPerSource {
			t.Fatalf("one address: %d refused, %d rows", refused, rows())
		}
		// A person from another address, with another client, is served.
		if _, err := s.CreateAuthRequest(AuthRequest{ClientID: "https://claude.ai/oauth/mcp-oauth-client-metadata", RedirectURI: "https://claude.ai/api/mcp/auth_callback",
			State: "st", Challenge: challenge, Resource: "https://relay.example/mcp", Source: "203.0.113.9"}, t0); err != nil {
			t.Fatalf("a person during the flood: %v", err)
		}
		// One client from many addresses: 64 kept.
		for i := range 20 {
			flood(5, fmt.Sprintf("2001:db8:%x::/64", i), "ccc_many")
		}
		var client int
		s.db.QueryRow(`SELECT count(*) FROM oauth_requests WHERE client_id = ?`, "ccc_many").Scan(&client)
		if client != limits.OAuthPendingPerClient {
			t.Fatalf("one client from many addresses holds %d rows", client)
		}
		// Many clients and addresses: 1,024 in all.
		for i := range 80 {
			flood(16, fmt.Sprintf("10.%d.0.1", i), fmt.Sprintf("ccc_c%d", i))
		}
		if n := rows(); n != limits.OAuthPendingMax {
			t.Fatalf("everyone's: %d rows", n)
		}
		// At their expiry they go, with the next request.
		later := t0.Add(limits.OAuthRequestTTL)
		if _, err := s.CreateAuthRequest(AuthRequest{ClientID: "ccc_next", RedirectURI: "https://c.example/cb", Challenge: challenge,
			Resource: "https://relay.example/mcp", Source: "192.0.2.1"}, later); err != nil || rows() != 1 {
			t.Fatalf("after the expiry: %d rows, %v", rows(), err)
		}
		// A state past its bound is refused.
		if _, err := s.CreateAuthRequest(AuthRequest{ClientID: "ccc_next", RedirectURI: "https://c.example/cb", Challenge: challenge,
			Resource: "https://relay.example/mcp", State: big + "s"}, later); !errcode.Is(err, errcode.InvalidArgument) {
			t.Errorf("a state of %d bytes: %v", len(big)+1, err)
		}
	})
}

// TestUnusedRegistrationsAreBounded: anyone may register a client, so at
// most OAuthUnusedClientsMax registrations wait for their first use; one
// more is refused until one is used or expires.
func TestUnusedRegistrationsAreBounded(t *testing.T) {
	if limits.OAuthUnusedClientsMax != 4096 {
		t.Fatalf("OAuthUnusedClientsMax = %d, documented as 4096", limits.OAuthUnusedClientsMax)
	}
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		first, err := s.RegisterClient(OAuthClient{RedirectURIs: []string{"https://c.example/cb"}}, t0)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		tx, err := s.db.begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range limits.OAuthUnusedClientsMax - 1 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO oauth_clients(id, name, redirect_uris, created_at) VALUES (?, '', '["https://c.example/cb"]', ?)`,
				fmt.Sprintf("ccc_%032x", i+1), t0.UnixNano()); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RegisterClient(OAuthClient{RedirectURIs: []string{"https://c.example/cb"}}, t0); !errors.Is(err, ErrRegistrationsFull) {
			t.Fatalf("one registration past the bound: %v", err)
		}
		// Used, the first no longer counts.
		code, _, err := s.ApproveAuthRequest(mustRequest(t, s, first.ID), specT, t0)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.RedeemAuthCode(code, func(*AuthCode) error { return nil }, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RegisterClient(OAuthClient{RedirectURIs: []string{"https://c.example/cb"}}, t0); err != nil {
			t.Fatalf("after one was used: %v", err)
		}
		// Expired, the rest go.
		if _, err := s.RegisterClient(OAuthClient{RedirectURIs: []string{"https://c.example/cb"}}, t0.Add(limits.OAuthUnusedClientTTL)); err != nil {
			t.Fatalf("after they expired: %v", err)
		}
	})
}

func mustRequest(t *testing.T, s *Store, clientID string) string {
	t.Helper()
	id, err := s.CreateAuthRequest(AuthRequest{ClientID: clientID, RedirectURI: "https://c.example/cb", Challenge: challenge,
		Resource: "https://relay.example/mcp", Source: "192.0.2.1"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
