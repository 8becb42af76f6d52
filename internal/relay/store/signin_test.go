package store

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// TestSSOSignInMakesTheAdmin: the first SSO sign-in makes its admin, the
// next ones reuse them, each with a new session; a revoked admin is
// refused with the sign-in codes' one refusal until `relay admin create`
// brings them back.
func TestSSOSignInMakesTheAdmin(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		first, err := s.SSOSignIn("alice_at_example.com", t0)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := s.AuthSession(first, t0)
		if err != nil || ps.Admin != "alice_at_example.com" {
			t.Fatalf("the SSO session: %+v, %v", ps, err)
		}
		second, err := s.SSOSignIn("alice_at_example.com", t0)
		if err != nil || second == first {
			t.Fatalf("a second sign-in: %q (first %q), %v", second, first, err)
		}
		admins, _ := s.Admins(t0)
		if len(admins) != 1 || admins[0].Sessions != 2 {
			t.Fatalf("admins %+v", admins)
		}
		_, _, refusal := s.SignIn("ccA-wrong", t0)
		if err := s.RevokeAdmin("alice_at_example.com", t0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SSOSignIn("alice_at_example.com", t0); err == nil || err.Error() != refusal.Error() {
			t.Fatalf("a revoked admin: %v, want %v", err, refusal)
		}
		if _, err := s.AuthSession(first, t0); err == nil {
			t.Fatal("a revoked admin's SSO session still serves")
		}
		if _, err := s.CreateSignIn("alice_at_example.com", time.Minute, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SSOSignIn("alice_at_example.com", t0); err != nil {
			t.Fatalf("after admin create: %v", err)
		}
		if _, err := s.SSOSignIn("not an admin name", t0); err == nil || err.Error() != refusal.Error() {
			t.Fatalf("a name no admin may have: %v", err)
		}
	})
}

// TestPasskeysBelongToTheirAdmin: an admin adds passkeys up to the bound,
// sees only their own, signs in with one (its record updated, its use
// noted), removes only their own; a removed passkey and a revoked admin's
// passkeys no longer sign in, and the relay then offers none.
func TestPasskeysBelongToTheirAdmin(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		signInT(t, s, "alice")
		signInT(t, s, "bob")
		if has, err := s.HasPasskeys(); err != nil || has {
			t.Fatalf("HasPasskeys on a new relay: %v, %v", has, err)
		}
		if err := s.AddPasskey("alice", []byte("a1"), []byte("rec-a1"), t0); err != nil {
			t.Fatal(err)
		}
		if err := s.AddPasskey("bob", []byte("a1"), []byte("rec"), t0); !errcode.Is(err, errcode.AlreadyExists) {
			t.Fatalf("the same credential for another admin: %v", err)
		}
		if err := s.AddPasskey("carol", []byte("c1"), []byte("rec"), t0); !errcode.Is(err, errcode.NotFound) {
			t.Fatalf("a passkey for no admin: %v", err)
		}
		for _, bad := range [][2][]byte{{nil, []byte("r")}, {[]byte("x"), nil}, {bytes.Repeat([]byte("x"), 1024), []byte("r")},
			{[]byte("x"), bytes.Repeat([]byte("r"), limits.MaxPasskeyBytes+1)}} {
			if err := s.AddPasskey("alice", bad[0], bad[1], t0); !errcode.Is(err, errcode.InvalidArgument) {
				t.Errorf("a passkey of %d and %d bytes: %v", len(bad[0]), len(bad[1]), err)
			}
		}
		if err := s.AddPasskey("bob", []byte("b1"), []byte("rec-b1"), t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if has, _ := s.HasPasskeys(); !has {
			t.Fatal("HasPasskeys with two")
		}
		mine, err := s.Passkeys("alice")
		if err != nil || len(mine) != 1 || string(mine[0].ID) != "a1" || mine[0].UsedAt != nil || !mine[0].CreatedAt.Equal(t0) {
			t.Fatalf("alice's passkeys: %+v, %v", mine, err)
		}
		p, err := s.FindPasskey([]byte("b1"))
		if err != nil || p.Admin != "bob" || string(p.Credential) != "rec-b1" {
			t.Fatalf("FindPasskey: %+v, %v", p, err)
		}
		admin, session, err := s.PasskeySignIn([]byte("a1"), []byte("rec-a1-used"), t0.Add(time.Minute))
		if err != nil || admin != "alice" {
			t.Fatalf("PasskeySignIn: %q, %v", admin, err)
		}
		if ps, err := s.AuthSession(session, t0.Add(time.Minute)); err != nil || ps.Admin != "alice" {
			t.Fatalf("the passkey's session: %+v, %v", ps, err)
		}
		mine, _ = s.Passkeys("alice")
		if string(mine[0].Credential) != "rec-a1-used" || mine[0].UsedAt == nil || !mine[0].UsedAt.Equal(t0.Add(time.Minute)) {
			t.Fatalf("after use: %+v", mine[0])
		}
		if err := s.RemovePasskey("alice", []byte("b1")); !errcode.Is(err, errcode.NotFound) {
			t.Fatalf("removing another admin's passkey: %v", err)
		}
		if err := s.RemovePasskey("alice", []byte("a1")); err != nil {
			t.Fatal(err)
		}
		_, _, refusal := s.SignIn("ccA-wrong", t0)
		if _, _, err := s.PasskeySignIn([]byte("a1"), []byte("r"), t0); err == nil || err.Error() != refusal.Error() {
			t.Fatalf("a removed passkey: %v", err)
		}
		if _, err := s.FindPasskey([]byte("a1")); err == nil || err.Error() != refusal.Error() {
			t.Fatalf("FindPasskey of a removed passkey: %v", err)
		}
		if err := s.RevokeAdmin("bob", t0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.PasskeySignIn([]byte("b1"), []byte("r"), t0); err == nil || err.Error() != refusal.Error() {
			t.Fatalf("a revoked admin's passkey: %v", err)
		}
		if has, _ := s.HasPasskeys(); has {
			t.Fatal("HasPasskeys after the last was removed and its admin revoked")
		}
		for i := range limits.PasskeysPerAdmin {
			if err := s.AddPasskey("alice", []byte(fmt.Sprint("k", i)), []byte("r"), t0); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.AddPasskey("alice", []byte("one-more"), []byte("r"), t0); !errcode.Is(err, errcode.Conflict) {
			t.Fatalf("passkey %d: %v", limits.PasskeysPerAdmin+1, err)
		}
	})
}

// TestSignInStateIsTakenOnce: a sign-in under way finishes once, within
// its time and as its own kind; every other answer is the one refusal,
// and a state presented as the wrong kind is spent all the same.
func TestSignInStateIsTakenOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		_, _, refusal := s.SignIn("ccA-wrong", t0)
		id, err := s.PutSignInState("oidc", []byte("state"), t0)
		if err != nil {
			t.Fatal(err)
		}
		if data, err := s.TakeSignInState(id, "oidc", t0.Add(limits.SignInStateTTL-1)); err != nil || string(data) != "state" {
			t.Fatalf("first take: %q, %v", data, err)
		}
		late, _ := s.PutSignInState("oidc", []byte("x"), t0)
		wrongKind, _ := s.PutSignInState("oidc", []byte("x"), t0)
		for name, take := range map[string]func() error{
			"taken":      func() error { _, err := s.TakeSignInState(id, "oidc", t0); return err },
			"late":       func() error { _, err := s.TakeSignInState(late, "oidc", t0.Add(limits.SignInStateTTL)); return err },
			"wrong kind": func() error { _, err := s.TakeSignInState(wrongKind, "passkey", t0); return err },
			"malformed":  func() error { _, err := s.TakeSignInState("short", "oidc", t0); return err },
			"unknown":    func() error { _, err := s.TakeSignInState(randomB64(), "oidc", t0); return err },
		} {
			if err := take(); err == nil || err.Error() != refusal.Error() {
				t.Errorf("%s: %v, want the one refusal", name, err)
			}
		}
		if _, err := s.TakeSignInState(wrongKind, "oidc", t0); err == nil {
			t.Error("a state presented as the wrong kind was not spent")
		}
		if _, err := s.PutSignInState("oidc", make([]byte, limits.MaxSignInStateBytes+1), t0); !errcode.Is(err, errcode.InvalidArgument) {
			t.Errorf("an oversized state: %v", err)
		}
	})
}
