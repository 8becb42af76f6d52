package store

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
)

func enrollT(t *testing.T, s *Store, codeName, proposed string) (*Device, string) {
	t.Helper()
	dev, tok, _, err := s.Enroll(mustCode(t, s, codeName, time.Hour, t0), proposed, t0)
	if err != nil {
		t.Fatal(err)
	}
	return dev, tok
}

// refusal returns the DeviceRefusal behind a refused AuthDevice, or nil.
func refusal(t *testing.T, s *Store, tok string, now time.Time) *DeviceRefusal {
	t.Helper()
	d, secret, err := s.AuthDevice(tok, now)
	if err == nil || d != nil || secret != nil {
		t.Fatalf("AuthDevice accepted the token: %+v", d)
	}
	wantCode(t, err, errcode.PermissionDenied)
	var r *DeviceRefusal
	if !errors.As(err, &r) {
		return nil
	}
	return r
}

func standing(t *testing.T, s *Store, id string) *Device {
	t.Helper()
	d, err := s.FindDevice(id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRotatedAwayTokenMarksCompromised: after a rotation the new token
// links and the old one, presented again, marks the device compromised
// once; from then on every token of the device is refused.
func TestRotatedAwayTokenMarksCompromised(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		dev, old := enrollT(t, s, "", "box")
		if d := standing(t, s, dev.ID); d.Standing != "active" || d.StandingAt != nil {
			t.Fatalf("a new device stands %q at %v", d.Standing, d.StandingAt)
		}
		next := NewDeviceToken()
		if !devTokRE.MatchString(next) || next == old {
			t.Fatal("NewDeviceToken is malformed or repeats")
		}
		if err := s.RotateDeviceToken(dev.ID, old, next, t0); err != nil {
			t.Fatal(err)
		}
		if got, _, err := s.AuthDevice(next, t0); err != nil || got.ID != dev.ID {
			t.Fatalf("the rotated-in token: %v %v", got, err)
		}
		// A late confirmation of the same rotation changes nothing.
		if err := s.RotateDeviceToken(dev.ID, old, NewDeviceToken(), t0); !errcode.Is(err, errcode.PermissionDenied) {
			t.Fatalf("rotating away a token that is not current: %v", err)
		}
		if _, _, err := s.AuthDevice(next, t0); err != nil {
			t.Fatalf("a refused rotation broke the current token: %v", err)
		}

		at := t0.Add(time.Hour)
		r := refusal(t, s, old, at)
		if r == nil || r.DeviceID != dev.ID || r.Standing != "compromised" || !r.Detected {
			t.Fatalf("the rotated-away token: %+v", r)
		}
		d := standing(t, s, dev.ID)
		if d.Standing != "compromised" || d.StandingAt == nil || !d.StandingAt.Equal(at) {
			t.Fatalf("after the copy showed: %q at %v", d.Standing, d.StandingAt)
		}
		// Detected once; the current token is refused as well.
		if r := refusal(t, s, old, at.Add(time.Hour)); r == nil || r.Detected {
			t.Fatalf("the second presentation: %+v", r)
		}
		if r := refusal(t, s, next, at); r == nil || r.Standing != "compromised" || r.Detected {
			t.Fatalf("the current token of a compromised device: %+v", r)
		}
		if err := s.RotateDeviceToken(dev.ID, next, NewDeviceToken(), at); !errcode.Is(err, errcode.PermissionDenied) {
			t.Fatalf("a compromised device rotated: %v", err)
		}
		if d := standing(t, s, dev.ID); !d.StandingAt.Equal(at) {
			t.Fatalf("standing_at moved to %v", d.StandingAt)
		}
		raw, _ := json.Marshal(d)
		if !strings.Contains(string(raw), `"standing":"compromised","standing_at":"`) {
			t.Fatalf("device JSON: %s", raw)
		}
		// A refusal's message is content-free.
		_, _, err := s.AuthDevice(old, at)
		if msg := err.(*errcode.Error).Message; strings.Contains(msg, dev.ID) || strings.Contains(msg, "box") {
			t.Fatalf("refusal message %q", msg)
		}
	})
}

func TestRotateDeviceTokenRefusesBadInput(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		dev, tok := enrollT(t, s, "", "box")
		for _, c := range [][2]string{{tok, tok}, {tok, "ccd_short"}, {"", NewDeviceToken()}} {
			if err := s.RotateDeviceToken(dev.ID, c[0], c[1], t0); !errcode.Is(err, errcode.InvalidArgument) {
				t.Fatalf("RotateDeviceToken(%d, %d bytes): %v", len(c[0]), len(c[1]), err)
			}
		}
		if err := s.RotateDeviceToken("no-such-device", tok, NewDeviceToken(), t0); !errcode.Is(err, errcode.PermissionDenied) {
			t.Fatalf("another device's token: %v", err)
		}
		if _, _, err := s.AuthDevice(tok, t0); err != nil {
			t.Fatalf("refused rotations changed the token: %v", err)
		}
	})
}

func TestRevokeDevice(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		dev, tok := enrollT(t, s, "", "box")
		other, otherTok := enrollT(t, s, "", "other")
		at := t0.Add(time.Minute)
		d, revoked, err := s.RevokeDevice("box", at)
		if err != nil || !revoked || d.ID != dev.ID || d.Standing != "revoked" || !d.StandingAt.Equal(at) {
			t.Fatalf("RevokeDevice by name: %+v %v %v", d, revoked, err)
		}
		if r := refusal(t, s, tok, at); r == nil || r.Standing != "revoked" || r.Detected {
			t.Fatalf("a revoked device's token: %+v", r)
		}
		// Again, by ID: nothing changes.
		if d, revoked, err := s.RevokeDevice(dev.ID, at.Add(time.Hour)); err != nil || revoked || d.Standing != "revoked" || !d.StandingAt.Equal(at) {
			t.Fatalf("revoking again: %+v %v %v", d, revoked, err)
		}
		if _, _, err := s.RevokeDevice("nope", at); !errcode.Is(err, errcode.NotFound) {
			t.Fatalf("revoking an unknown device: %v", err)
		}
		if got, _, err := s.AuthDevice(otherTok, at); err != nil || got.ID != other.ID {
			t.Fatalf("another device after a revocation: %v", err)
		}
	})
}

// TestLeaveDevice: a device that leaves is removed, its token refused as
// a revoked device's, its name free for the next enrollment; leaving
// again, or a revoked device leaving, changes nothing; by ID only.
func TestLeaveDevice(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		dev, tok := enrollT(t, s, "", "box")
		other, _ := enrollT(t, s, "", "other")
		at := t0.Add(time.Minute)
		d, left, err := s.LeaveDevice(dev.ID, at)
		if err != nil || !left || d.Standing != "removed" || !d.StandingAt.Equal(at) {
			t.Fatalf("LeaveDevice: %+v %v %v", d, left, err)
		}
		if r := refusal(t, s, tok, at); r == nil || r.Standing != "removed" || r.Detected {
			t.Fatalf("a removed device's token: %+v", r)
		}
		if d, left, err := s.LeaveDevice(dev.ID, at.Add(time.Hour)); err != nil || left || !d.StandingAt.Equal(at) {
			t.Fatalf("leaving again: %+v %v %v", d, left, err)
		}
		if _, _, err := s.RevokeDevice(other.ID, at); err != nil {
			t.Fatal(err)
		}
		if d, left, err := s.LeaveDevice(other.ID, at); err != nil || left || d.Standing != "revoked" {
			t.Fatalf("a revoked device leaving: %+v %v %v", d, left, err)
		}
		if again, _ := enrollT(t, s, "box", ""); again.Name != "box" || again.ID == dev.ID {
			t.Fatalf("enrolled under a removed device's name: %+v", again)
		}
	})
}

// TestReenrollingRecovers: a code naming a compromised or revoked device's
// name enrolls a new device under that name, and the old credentials are
// plain unknown tokens; a device's own proposal never displaces one, and
// an active device keeps its name.
func TestReenrollingRecovers(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		dev, old := enrollT(t, s, "box", "")
		next := NewDeviceToken()
		if err := s.RotateDeviceToken(dev.ID, old, next, t0); err != nil {
			t.Fatal(err)
		}
		refusal(t, s, old, t0)

		proposed, _ := enrollT(t, s, "", "box")
		if proposed.Name != "box-2" {
			t.Fatalf("a proposed name displaced a compromised device: %q", proposed.Name)
		}
		again, tok := enrollT(t, s, "box", "")
		if again.Name != "box" || again.ID == dev.ID || again.Standing != "active" {
			t.Fatalf("re-enrolled: %+v", again)
		}
		if got, _, err := s.AuthDevice(tok, t0); err != nil || got.ID != again.ID {
			t.Fatalf("the re-enrolled device's token: %v", err)
		}
		for _, stale := range []string{old, next} {
			if r := refusal(t, s, stale, t0); r != nil {
				t.Fatalf("an old credential still names a device: %+v", r)
			}
		}
		if _, err := s.FindDevice(dev.ID); !errcode.Is(err, errcode.NotFound) {
			t.Fatalf("the replaced device: %v", err)
		}

		// Revoked works the same; an active device keeps its name.
		if _, _, err := s.RevokeDevice("box", t0); err != nil {
			t.Fatal(err)
		}
		if d, _ := enrollT(t, s, "box", ""); d.Name != "box" {
			t.Fatalf("re-enrolling a revoked device: %q", d.Name)
		}
		if d, _ := enrollT(t, s, "box", ""); d.Name != "box-3" {
			t.Fatalf("a code naming an active device: %q", d.Name)
		}
	})
}
