package relay

import (
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/relay/store"
)

// TestStandingEndsEqualAFullRead: over random sequences of links taken
// and let go and of everything that changes devices (enrolling,
// re-enrolling under a revoked device's name, revoking, a rotated-away
// token presented, deletions and standing changes written straight into
// the database as the sqlite3 shell would, last-seen updates), written by
// this relay's store or by another process's, the link watcher ends
// exactly the links that reading every device's standing at that moment
// would end, although it reads them only when the standing-change counter
// moved or a link was taken. Admission is split in its two steps, the
// token's check and the link's hold, with changes between them.
func TestStandingEndsEqualAFullRead(t *testing.T) {
	dir := t.TempDir()
	open := func() *store.Store {
		st, err := store.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	st, other := open(), open()
	// With a busy timeout, as `sqlite3 -cmd '.timeout 5000'`: without one,
	// a write that meets the relay's own gets SQLITE_BUSY at once.
	shell, err := sql.Open("sqlite", "file:"+filepath.Join(dir, store.File)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer shell.Close()
	srv, err := New(st)
	if err != nil {
		t.Fatal(err)
	}
	type device struct{ id, name, token, retired string }
	now := time.Now()
	for seed := uint64(1); seed <= 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 0))
		var devs []*device
		var admitted []string // authenticated, not yet held
		var w watchState
		for id := range srv.held {
			srv.letGo(id, nil)
		}
		pick := func() *device {
			if len(devs) == 0 {
				return nil
			}
			return devs[r.IntN(len(devs))]
		}
		stores := []*store.Store{st, other}
		for step := range 60 {
			s := stores[r.IntN(2)]
			var op string
			switch r.IntN(11) {
			case 0, 1:
				op = "enroll"
				code, err := s.CreateEnrollCode(fmt.Sprintf("s%d-d%d", seed, r.IntN(5)), time.Hour, now)
				if err != nil {
					t.Fatal(err)
				}
				d, tok, _, err := s.Enroll(code, "", now)
				if err != nil {
					t.Fatal(err)
				}
				devs = append(devs, &device{id: d.ID, name: d.Name, token: tok})
			case 2, 3:
				op = "authenticate"
				if d := pick(); d != nil {
					if _, _, err := st.AuthDevice(d.token, now); err == nil {
						admitted = append(admitted, d.id)
					}
				}
			case 4:
				op = "hold"
				if len(admitted) > 0 {
					i := r.IntN(len(admitted))
					srv.hold(admitted[i], nil)
					admitted = slices.Delete(admitted, i, i+1)
				}
			case 5:
				op = "let go"
				for id := range srv.held {
					srv.letGo(id, nil)
					break
				}
			case 6:
				op = "revoke"
				if d := pick(); d != nil {
					s.RevokeDevice([]string{d.id, d.name}[r.IntN(2)], now)
				}
			case 7:
				op = "rotate and present the rotated-away token"
				if d := pick(); d != nil {
					next := store.NewDeviceToken()
					if s.RotateDeviceToken(d.id, d.token, next, now) == nil {
						d.retired, d.token = d.token, next
					}
					if d.retired != "" && r.IntN(2) == 0 {
						s.AuthDevice(d.retired, now)
					}
				}
			case 8:
				op = "delete in the shell"
				if d := pick(); d != nil {
					if _, err := shell.Exec(`DELETE FROM devices WHERE id = ?`, d.id); err != nil {
						t.Fatal(err)
					}
				}
			case 9:
				op = "standing set in the shell"
				if d := pick(); d != nil {
					to := []string{store.StandingActive, store.StandingRevoked, store.StandingCompromised}[r.IntN(3)]
					if _, err := shell.Exec(`UPDATE devices SET standing = ? WHERE id = ?`, to, d.id); err != nil {
						t.Fatal(err)
					}
				}
			case 10:
				op = "last seen"
				s.SetSeen(slices.Collect(maps.Keys(srv.held)), now)
			}

			// What reading every standing now would end.
			all, err := other.Standings()
			if err != nil {
				t.Fatal(err)
			}
			standing := map[string]string{}
			for _, d := range all {
				standing[d.ID] = d.Standing
			}
			want := map[string]string{}
			for id := range srv.held {
				if st, ok := standing[id]; !ok {
					want[id] = "gone"
				} else if st != store.StandingActive {
					want[id] = st
				}
			}
			got := srv.standingEnds(&w)
			if !maps.Equal(got, want) {
				t.Fatalf("seed %d step %d (%s): the watcher ends %v, reading every standing ends %v", seed, step, op, got, want)
			}
			// The ended links go, as a closed link's handler lets go of it.
			for id := range got {
				srv.letGo(id, nil)
			}
		}
	}
}
