package store

import (
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
)

// FuzzAuthToken feeds arbitrary bearer strings to AuthToken (and, as they
// are bearer strings too, to AuthDevice): they must never panic and never
// authenticate, except the real credentials themselves, and only the
// rotated-away token itself could mark its device compromised.
func FuzzAuthToken(f *testing.F) {
	dir := f.TempDir()
	s, err := Open(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	tok, bearer, err := s.CreateToken(TokenSpec{Name: "fuzz", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, t0)
	if err != nil {
		f.Fatal(err)
	}
	code, err := s.CreateEnrollCode("", time.Hour, t0)
	if err != nil {
		f.Fatal(err)
	}
	_, devTok, _, err := s.Enroll(code, "fuzz", t0)
	if err != nil {
		f.Fatal(err)
	}
	code, err = s.CreateEnrollCode("", time.Hour, t0)
	if err != nil {
		f.Fatal(err)
	}
	rotated, retired, _, err := s.Enroll(code, "rotated", t0)
	if err != nil {
		f.Fatal(err)
	}
	if err := s.RotateDeviceToken(rotated.ID, retired, NewDeviceToken(), t0); err != nil {
		f.Fatal(err)
	}
	if _, err := s.AuthToken(bearer, t0); err != nil {
		f.Fatal(err) // the target must be able to authenticate at all
	}

	f.Add(bearer[:len(bearer)-1] + "B")
	f.Add("cct_" + tok.ID + "_" + devTok[4:])
	f.Add(devTok)
	f.Add("")
	f.Add("cct_tok_000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("ccd_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("\xff\xfe\x00cct_")
	f.Fuzz(func(t *testing.T, b string) {
		if b != bearer {
			got, err := s.AuthToken(b, t0)
			if err == nil || got != nil {
				t.Fatalf("AuthToken authenticated a forged bearer (len %d)", len(b))
			}
			if !errcode.Is(err, errcode.PermissionDenied) {
				t.Fatalf("AuthToken: %v, want permission_denied", err)
			}
		}
		if b != devTok {
			d, sec, err := s.AuthDevice(b, t0)
			if err == nil || d != nil || sec != nil {
				t.Fatalf("AuthDevice authenticated a forged token (len %d)", len(b))
			}
			if !errcode.Is(err, errcode.PermissionDenied) {
				t.Fatalf("AuthDevice: %v, want permission_denied", err)
			}
		}
		if b != retired {
			if d, err := s.FindDevice(rotated.ID); err != nil || d.Standing != StandingActive {
				t.Fatalf("a forged token changed a device's standing: %+v %v", d, err)
			}
		}
	})
}
