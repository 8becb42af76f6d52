package authz

import (
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
)

func grantAt(id string, iat time.Time) *Grant {
	return &Grant{Device: "d", Tool: "t", Principal: "p", IssuedAt: iat.Unix(), Expires: iat.Add(60 * time.Second).Unix(), ID: id}
}

func TestUsedGrantsRefuseAReplayUntilTheGrantIsDead(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	u := NewUsedGrants(2)
	a, b, c := grantAt("a", t0), grantAt("b", t0), grantAt("c", t0)
	if err := u.Use(a, t0); err != nil {
		t.Fatal(err)
	}
	if err := u.Use(a, t0.Add(89*time.Second)); errcode.From(err).Code != errcode.GrantInvalid {
		t.Fatalf("replay within expiry plus the 30 s skew: %v", err)
	}
	if err := u.Use(b, t0); err != nil {
		t.Fatal(err)
	}
	// Full of live grants: a new one is refused rather than an old one
	// forgotten while it could still verify.
	if err := u.Use(c, t0.Add(90*time.Second)); errcode.From(err).Code != errcode.GrantInvalid {
		t.Fatalf("full memory of live grants: %v", err)
	}
	// 60 s life and 30 s skew later, a and b can no longer verify, so
	// they make room.
	if err := u.Use(c, t0.Add(91*time.Second)); err != nil {
		t.Fatalf("after the old grants died: %v", err)
	}
}

func TestNewUsedGrantsDefaultsToTheContractBound(t *testing.T) {
	if u := NewUsedGrants(0); u.max != 100_000 {
		t.Fatalf("default bound %d", u.max)
	}
}
