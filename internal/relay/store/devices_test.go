package store

import (
	"bytes"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
)

func mustCode(t *testing.T, s *Store, name string, ttl time.Duration, now time.Time) string {
	t.Helper()
	code, err := s.CreateEnrollCode(name, ttl, now)
	if err != nil {
		t.Fatal(err)
	}
	if !codeRE.MatchString(code) {
		t.Fatalf("enrollment code has the wrong format (len %d)", len(code))
	}
	return code
}

func TestEnrollAndAuthDevice(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		code := mustCode(t, s, "", time.Hour, t0)
		dev, tok, secret, err := s.Enroll(code, "box-1", t0.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if !uuidRE.MatchString(dev.ID) || dev.Name != "box-1" || !dev.EnrolledAt.Equal(t0.Add(time.Minute)) ||
			dev.EnrolledAt.Location() != time.UTC || dev.Connected || dev.LastSeen != nil {
			t.Fatalf("device %+v", dev)
		}
		if !devTokRE.MatchString(tok) || len(secret) != 32 || bytes.Equal(secret, make([]byte, 32)) {
			t.Fatalf("token/secret malformed (token len %d, secret len %d)", len(tok), len(secret))
		}
		got, gotSecret, err := s.AuthDevice(tok, t0)
		if err != nil {
			t.Fatal(err)
		}
		if *got != *dev || !bytes.Equal(gotSecret, secret) {
			t.Fatalf("AuthDevice = %+v, want %+v", got, dev)
		}
		// Another enrollment gets different credentials.
		dev2, tok2, secret2, err := s.Enroll(mustCode(t, s, "", time.Hour, t0), "box-2", t0)
		if err != nil {
			t.Fatal(err)
		}
		if dev2.ID == dev.ID || tok2 == tok || bytes.Equal(secret2, secret) {
			t.Fatal("two enrollments share credentials")
		}
		if got, _, err := s.AuthDevice(tok2, t0); err != nil || got.ID != dev2.ID {
			t.Fatalf("AuthDevice(second) = %v, %v", got, err)
		}
		// A well-formed token that was never issued, and broken ones.
		flipped := flipAt(tok, 4)
		for _, bad := range []string{"", tok[:len(tok)-1], tok + "A", "ccd_" + strings.Repeat("A", 43), flipped,
			strings.Replace(tok, "ccd_", "cct_", 1), strings.ToUpper(tok), tok + "\n", "\xff" + tok[1:],
			strings.Repeat("ccd_", 1<<18)} {
			if _, _, err := s.AuthDevice(bad, t0); !errcode.Is(err, errcode.PermissionDenied) {
				t.Fatalf("AuthDevice(bad #%d) = %v, want permission_denied", len(bad), err)
			}
		}
	})
}

func TestEnrollCodeUsedOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		code := mustCode(t, s, "", time.Hour, t0)
		if _, _, _, err := s.Enroll(code, "a", t0); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := s.Enroll(code, "b", t0)
		wantCode(t, err, errcode.PermissionDenied)
		if err.(*errcode.Error).Message != "enrollment code is invalid, expired or used, or the proposed device name is not valid" {
			t.Fatalf("message %q", err.(*errcode.Error).Message)
		}
		devs, err := s.Devices()
		if err != nil || len(devs) != 1 {
			t.Fatalf("devices %v %v, want exactly one", devs, err)
		}
	})
}

func TestEnrollCodeExpired(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		code := mustCode(t, s, "", time.Minute, t0)
		_, _, _, err := s.Enroll(code, "a", t0.Add(time.Minute))
		wantCode(t, err, errcode.PermissionDenied)
		expiredMsg := err.(*errcode.Error).Message
		// The same code just before expiry still works.
		if _, _, _, err := s.Enroll(code, "a", t0.Add(time.Minute-time.Nanosecond)); err != nil {
			t.Fatalf("code refused before expiry: %v", err)
		}
		_, _, _, err = s.Enroll(code, "a", t0)
		wantCode(t, err, errcode.PermissionDenied)
		usedMsg := err.(*errcode.Error).Message
		_, _, _, err = s.Enroll("ccE-"+strings.Repeat("A", 20), "a", t0)
		wantCode(t, err, errcode.PermissionDenied)
		if unknownMsg := err.(*errcode.Error).Message; expiredMsg != usedMsg || usedMsg != unknownMsg {
			t.Fatalf("messages differ: %q %q %q", expiredMsg, usedMsg, unknownMsg)
		}
	})
}

func TestEnrollCodeCaseInsensitive(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		code := mustCode(t, s, "", time.Hour, t0)
		if _, _, _, err := s.Enroll(strings.ToLower(code), "a", t0); err != nil {
			t.Fatalf("lower-case code refused: %v", err)
		}
		_, _, _, err := s.Enroll(code, "b", t0)
		wantCode(t, err, errcode.PermissionDenied)
	})
}

func TestEnrollMalformedCodes(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		code := mustCode(t, s, "", time.Hour, t0)
		for _, bad := range []string{"", "ccE-", code[:len(code)-1], code + "A", " " + code[1:], "ccX-" + code[4:],
			code[:23] + "1", code[:23] + "=", code[:10] + "\xff" + code[11:], strings.Repeat("A", 1<<20)} {
			_, _, _, err := s.Enroll(bad, "a", t0)
			wantCode(t, err, errcode.PermissionDenied)
		}
		// None of that consumed the real code.
		if _, _, _, err := s.Enroll(code, "a", t0); err != nil {
			t.Fatal(err)
		}
	})
}

func TestEnrollConcurrentExactlyOneWins(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		dir := newPlace(t)
		stores := []*Store{openT(t, dir), openT(t, dir)} // as two processes
		for round := range raceRounds {
			code := mustCode(t, stores[0], "", time.Hour, t0)
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				wins    int
				denials int
			)
			for i := range 8 {
				wg.Go(func() {
					_, _, _, err := stores[i%2].Enroll(code, "racer", t0)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						wins++
					case errcode.Is(err, errcode.PermissionDenied):
						denials++
					default:
						t.Errorf("Enroll: %v", err)
					}
				})
			}
			wg.Wait()
			if wins != 1 || denials != 7 {
				t.Fatalf("round %d: %d wins, %d denials; want 1 and 7", round, wins, denials)
			}
		}
		devs, err := stores[1].Devices()
		if err != nil || len(devs) != raceRounds {
			t.Fatalf("devices %v %v, want %d", devs, err, raceRounds)
		}
	})
}

func TestEnrollNames(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		enroll := func(codeName, proposed string) *Device {
			t.Helper()
			d, _, _, err := s.Enroll(mustCode(t, s, codeName, time.Hour, t0), proposed, t0)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		for i, want := range []string{"laptop", "laptop-2", "laptop-3"} {
			if d := enroll("", "laptop"); d.Name != want {
				t.Fatalf("enrollment %d named %q, want %q", i, d.Name, want)
			}
		}
		// The code's name wins over the proposed one, and is suffixed too.
		if d := enroll("build", "ignored name!"); d.Name != "build" {
			t.Fatalf("named %q, want build", d.Name)
		}
		if d := enroll("laptop", "x"); d.Name != "laptop-4" {
			t.Fatalf("named %q, want laptop-4", d.Name)
		}
		// "laptop-2" taken as a base gets its own suffix.
		if d := enroll("", "laptop-2"); d.Name != "laptop-2-2" {
			t.Fatalf("named %q, want laptop-2-2", d.Name)
		}
		// A 64-byte name is shortened to fit its suffix.
		long := strings.Repeat("n", 64)
		if d := enroll("", long); d.Name != long {
			t.Fatalf("named %q", d.Name)
		}
		if d := enroll("", long); d.Name != strings.Repeat("n", 62)+"-2" {
			t.Fatalf("named %q, want 62 n's and -2", d.Name)
		}
		devs, err := s.Devices()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range devs {
			names = append(names, d.Name)
		}
		want := []string{"build", "laptop", "laptop-2", "laptop-2-2", "laptop-3", "laptop-4", strings.Repeat("n", 62) + "-2", long}
		if strings.Join(names, ",") != strings.Join(want, ",") {
			t.Fatalf("Devices() names %v, want %v (ordered by name)", names, want)
		}
	})
}

// uuidShaped is a name shaped like a device ID.
const uuidShaped = "0F8E7D6C-5B4A-4392-8170-6F5E4D3C2B1A"

// TestEnrollInvalidProposedName: a valid code without a name of its own,
// given an invalid proposed name, is refused exactly as a wrong code is,
// and stays usable.
func TestEnrollInvalidProposedName(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		code := mustCode(t, s, "", time.Hour, t0)
		_, _, _, wrong := s.Enroll("ccE-"+strings.Repeat("A", 20), "ok", t0)
		wantCode(t, wrong, errcode.PermissionDenied)
		for _, bad := range []string{"", "a b", "..", strings.Repeat("x", 65), "a/b", "\xff", uuidShaped, strings.ToLower(uuidShaped)} {
			_, _, _, err := s.Enroll(code, bad, t0)
			if got, want := errcode.From(err), errcode.From(wrong); *got != *want {
				t.Fatalf("proposed name %q: %v, want the wrong code's refusal %v", bad, err, wrong)
			}
		}
		// The refusals left the code usable.
		if d, _, _, err := s.Enroll(code, "ok", t0); err != nil || d.Name != "ok" {
			t.Fatalf("Enroll after invalid names: %v %v", d, err)
		}
	})
}

func TestCreateEnrollCodeValidation(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		for _, ttl := range []time.Duration{0, -time.Second} {
			_, err := s.CreateEnrollCode("", ttl, t0)
			wantCode(t, err, errcode.InvalidArgument)
		}
		_, err := s.CreateEnrollCode("", time.Duration(math.MaxInt64), t0)
		wantCode(t, err, errcode.InvalidArgument)
		for _, bad := range []string{"bad name", uuidShaped, strings.ToLower(uuidShaped)} {
			_, err = s.CreateEnrollCode(bad, time.Hour, t0)
			wantCode(t, err, errcode.InvalidArgument)
		}
		a, b := mustCode(t, s, "", time.Hour, t0), mustCode(t, s, "", time.Hour, t0)
		if a == b {
			t.Fatal("two codes are equal")
		}
	})
}

func TestEnrollCodesCollected(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		count := func() int {
			var n int
			if err := s.db.QueryRow(`SELECT count(*) FROM enroll_codes`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		old := mustCode(t, s, "", time.Minute, t0)
		mustCode(t, s, "", time.Hour, t0.Add(24*time.Hour)) // old expired < 1 day ago: kept
		if n := count(); n != 2 {
			t.Fatalf("%d codes, want 2", n)
		}
		mustCode(t, s, "", time.Hour, t0.Add(25*time.Hour)) // old expired > 1 day ago: deleted
		if n := count(); n != 2 {
			t.Fatalf("%d codes, want 2 (the stale one deleted)", n)
		}
		_, _, _, err := s.Enroll(old, "x", t0)
		wantCode(t, err, errcode.PermissionDenied)
	})
}

func TestFindDeviceAndConnection(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		dir := newPlace(t)
		s, cli := openT(t, dir), openT(t, dir)
		a, _, _, err := s.Enroll(mustCode(t, s, "", time.Hour, t0), "alpha", t0)
		if err != nil {
			t.Fatal(err)
		}
		b, _, _, err := s.Enroll(mustCode(t, s, "", time.Hour, t0), "beta", t0)
		if err != nil {
			t.Fatal(err)
		}
		// A device enrolled before names were kept from the shape of an ID,
		// named like another device's ID, is found by its own ID only.
		if _, err := s.db.Exec(`UPDATE devices SET name = ? WHERE id = ?`, strings.ToUpper(a.ID), b.ID); err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]string{a.ID: a.ID, strings.ToUpper(a.ID): a.ID, "alpha": a.ID, b.ID: b.ID} {
			d, err := cli.FindDevice(key)
			if err != nil || d.ID != want {
				t.Fatalf("FindDevice(%q) = %v, %v; want %s", key, d, err, want)
			}
		}
		for _, key := range []string{"", "ALPHA", "alph", "alpha ", strings.Repeat("a", 1<<20)} {
			_, err := cli.FindDevice(key)
			wantCode(t, err, errcode.NotFound)
		}

		at := t0.Add(time.Hour)
		rep := Replica{ID: "rpl-a", Name: "relay-a"}
		if err := s.JoinReplica(rep, at); err != nil {
			t.Fatal(err)
		}
		if took, err := s.TakeLink(a.ID, rep.ID, "", at); err != nil || !took {
			t.Fatalf("TakeLink = %v, %v", took, err)
		}
		d, err := cli.FindDevice("alpha")
		if err != nil || !d.Connected || d.Replica != rep.ID || d.LastSeen == nil || !d.LastSeen.Equal(at) || d.LastSeen.Location() != time.UTC {
			t.Fatalf("after connect: %+v %v", d, err)
		}
		if err := s.ReleaseLink(a.ID, rep.ID, at.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		d, _ = cli.FindDevice("alpha")
		if d.Connected || d.Replica != "" || !d.LastSeen.Equal(at.Add(time.Second)) {
			t.Fatalf("after disconnect: %+v", d)
		}
		_, err = s.TakeLink("no-such-id", rep.ID, "", at)
		wantCode(t, err, errcode.NotFound)

		// The links of a replica that leaves are released with it.
		s.TakeLink(a.ID, rep.ID, "", at)
		s.TakeLink(b.ID, rep.ID, "", at)
		if err := s.LeaveReplica(rep.ID); err != nil {
			t.Fatal(err)
		}
		devs, err := cli.Devices()
		if err != nil || len(devs) != 2 {
			t.Fatalf("Devices %v %v", devs, err)
		}
		for _, d := range devs {
			if d.Connected || d.Replica != "" || !d.LastSeen.Equal(at) {
				t.Fatalf("after the replica left: %+v", d)
			}
		}

		// SetSeen records many devices at once and skips one that is gone.
		later := at.Add(time.Minute)
		if err := s.SetSeen([]string{a.ID, "no-such-id", b.ID}, later); err != nil {
			t.Fatal(err)
		}
		devs, _ = cli.Devices()
		for _, d := range devs {
			if d.Connected || !d.LastSeen.Equal(later) {
				t.Fatalf("after SetSeen of devices whose links ended: %+v", d)
			}
		}
		wantCode(t, s.SetSeen([]string{a.ID}, time.Time{}), errcode.InvalidArgument)

		sts, err := cli.Standings()
		if err != nil || len(sts) != 2 {
			t.Fatalf("Standings %v %v", sts, err)
		}
		for _, st := range sts {
			if (st.ID != a.ID && st.ID != b.ID) || st.Standing != StandingActive {
				t.Fatalf("standing %+v", st)
			}
		}
	})
}

func TestDevicesEmpty(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		devs, err := openT(t, newPlace(t)).Devices()
		if err != nil || devs == nil || len(devs) != 0 {
			t.Fatalf("Devices() = %#v, %v; want empty non-nil", devs, err)
		}
	})
}

// flipAt returns s with the byte at i replaced by a different base64url
// character.
func flipAt(s string, i int) string {
	c := byte('A')
	if s[i] == 'A' {
		c = 'B'
	}
	return s[:i] + string(c) + s[i+1:]
}
