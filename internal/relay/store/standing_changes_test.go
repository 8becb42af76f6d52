package store

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// standingSet is Standings as a comparable value.
func standingSet(t *testing.T, s *Store) []string {
	t.Helper()
	all, err := s.Standings()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(all))
	for _, d := range all {
		out = append(out, d.ID+"="+d.Standing)
	}
	slices.Sort(out)
	return out
}

func changes(t *testing.T, s *Store) int64 {
	t.Helper()
	n, err := s.StandingChanges()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStandingChangesFollowStandings is the property a link watcher relies
// on: over random sequences of everything that writes devices (enrolling,
// re-enrolling under a revoked or compromised device's name, revoking by
// name or ID, presenting a rotated-away token, rotating, last-seen and
// connection updates, and deletions and standing changes written straight
// into the database as the sqlite3 shell would), done by this Store or by
// another one on the same database (another process), the counter never
// stays the same while the standings change; and it stays the same under
// the writes a linked, idle relay makes (last-seen, connections, rotations),
// so reading it is all such a relay does.
func TestStandingChangesFollowStandings(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		dir := newPlace(t)
		stores := []*Store{openT(t, dir), openT(t, dir)}
		type dev struct {
			id, name, token, retired string
		}
		for seed := uint64(1); seed <= 20; seed++ {
			r := rand.New(rand.NewPCG(seed, 0))
			var devs []dev
			now := t0
			for step := range 40 {
				s := stores[r.IntN(2)]
				now = now.Add(time.Second)
				pick := func() *dev {
					if len(devs) == 0 {
						return nil
					}
					return &devs[r.IntN(len(devs))]
				}
				before, beforeN := standingSet(t, s), changes(t, s)
				var op string
				quiet := false // a write that must leave the counter alone
				switch r.IntN(10) {
				case 0, 1:
					op = "enroll"
					name := fmt.Sprintf("d%d", r.IntN(6))
					code := mustCode(t, s, name, time.Hour, now)
					d, tok, _, err := s.Enroll(code, "", now)
					if err != nil {
						t.Fatal(err)
					}
					devs = slices.DeleteFunc(devs, func(x dev) bool { _, err := s.FindDevice(x.id); return err != nil })
					devs = append(devs, dev{id: d.ID, name: d.Name, token: tok})
				case 2:
					op = "revoke by name"
					if d := pick(); d != nil {
						s.RevokeDevice(d.name, now)
					}
				case 3:
					op = "revoke by ID"
					if d := pick(); d != nil {
						s.RevokeDevice(d.id, now)
					}
				case 4:
					op = "rotate"
					quiet = true
					if d := pick(); d != nil {
						next := NewDeviceToken()
						if s.RotateDeviceToken(d.id, d.token, next, now) == nil {
							d.retired, d.token = d.token, next
						}
					}
				case 5:
					op = "present a rotated-away token"
					if d := pick(); d != nil && d.retired != "" {
						s.AuthDevice(d.retired, now)
					}
				case 6:
					op = "last seen and connection"
					quiet = true
					ids := []string{}
					for _, d := range devs {
						ids = append(ids, d.id)
					}
					if err := s.SetSeen(ids, now); err != nil {
						t.Fatal(err)
					}
					if d := pick(); d != nil {
						s.JoinReplica(Replica{ID: "rpl", Name: "relay"}, now)
						if r.IntN(2) == 0 {
							s.TakeLink(d.id, "rpl", "", now)
						} else {
							s.ReleaseLink(d.id, "rpl", now)
						}
					}
					if r.IntN(4) == 0 {
						s.LeaveReplica("rpl")
					}
				case 7:
					op = "delete in the shell"
					if d := pick(); d != nil {
						if _, err := s.db.Exec(`DELETE FROM devices WHERE id = ?`, d.id); err != nil {
							t.Fatal(err)
						}
					}
				case 8:
					op = "standing set in the shell"
					if d := pick(); d != nil {
						st := []string{StandingActive, StandingRevoked, StandingCompromised}[r.IntN(3)]
						if _, err := s.db.Exec(`UPDATE devices SET standing = ? WHERE id = ?`, st, d.id); err != nil {
							t.Fatal(err)
						}
					}
				case 9:
					op = "authenticate"
					quiet = true
					if d := pick(); d != nil {
						s.AuthDevice(d.token, now)
					}
				}
				other := stores[r.IntN(2)]
				after, afterN := standingSet(t, other), changes(t, other)
				if afterN == beforeN && !slices.Equal(before, after) {
					t.Fatalf("seed %d step %d (%s): the standings changed and the counter stayed %d:\n%v\n%v", seed, step, op, afterN, before, after)
				}
				if quiet && afterN != beforeN {
					t.Fatalf("seed %d step %d (%s): the counter moved from %d to %d", seed, step, op, beforeN, afterN)
				}
			}
		}
	})
}
