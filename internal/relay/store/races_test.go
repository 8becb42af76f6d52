package store

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
)

// The races below run two Stores on one place, as two relay replicas (or
// a replica and the CLI), for many rounds; each finds exactly one winner.

const raceRounds = 25

// race runs f(i) for i in [0, n) at once and waits for all.
func race(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() { <-start; f(i) })
	}
	close(start)
	wg.Wait()
}

// TestRotationRaceOneWinner: two replicas confirm a rotation of the same
// current token, each to a token of its own; one commits, the other is
// refused, and only the winner's token authenticates.
func TestRotationRaceOneWinner(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		place := newPlace(t)
		stores := [2]*Store{openT(t, place), openT(t, place)}
		dev, current := enrollT(t, stores[0], "", "box")
		for round := range raceRounds {
			next := [2]string{NewDeviceToken(), NewDeviceToken()}
			var errs [2]error
			race(2, func(i int) { errs[i] = stores[i].RotateDeviceToken(dev.ID, current, next[i], t0) })
			won := -1
			for i, err := range errs {
				switch {
				case err == nil && won < 0:
					won = i
				case err == nil:
					t.Fatalf("round %d: both rotations of one token committed", round)
				case !errcode.Is(err, errcode.PermissionDenied):
					t.Fatalf("round %d: the losing rotation failed with %v, want permission_denied", round, err)
				}
			}
			if won < 0 {
				t.Fatalf("round %d: neither rotation committed: %v", round, errs)
			}
			if d, _, err := stores[1-won].AuthDevice(next[won], t0); err != nil || d.ID != dev.ID {
				t.Fatalf("round %d: the winner's token on the other replica: %v, %v", round, d, err)
			}
			current = next[won]
		}
	})
}

// TestRevocationRaceOneRevoker: two replicas revoke one device at once;
// exactly one call reports that it revoked it, and both then refuse the
// device's token.
func TestRevocationRaceOneRevoker(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		place := newPlace(t)
		stores := [2]*Store{openT(t, place), openT(t, place)}
		for round := range raceRounds {
			dev, tok := enrollT(t, stores[round%2], "", fmt.Sprintf("box%d", round))
			var revoked [2]bool
			race(2, func(i int) {
				d, did, err := stores[i].RevokeDevice(dev.ID, t0)
				if err != nil || d.Standing != StandingRevoked {
					t.Errorf("round %d: RevokeDevice: %+v, %v", round, d, err)
				}
				revoked[i] = did
			})
			if revoked[0] == revoked[1] {
				t.Fatalf("round %d: revoked by %v; want exactly one revoker", round, revoked)
			}
			for _, s := range stores {
				refusal(t, s, tok, t0)
			}
		}
	})
}

// TestTokenRevocationIsSeenAtOnceByTheOtherReplica: once RevokeToken
// returns on one replica, the other refuses the token on its next check,
// and its token-change counter has moved, every round.
func TestTokenRevocationIsSeenAtOnceByTheOtherReplica(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		place := newPlace(t)
		cli, relay := openT(t, place), openT(t, place)
		for round := range 4 * raceRounds {
			tk, bearer, err := cli.CreateToken(TokenSpec{Name: "tk", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}, t0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := relay.AuthToken(bearer, t0); err != nil {
				t.Fatalf("round %d: a new token is refused: %v", round, err)
			}
			before, err := relay.TokenChanges()
			if err != nil {
				t.Fatal(err)
			}
			if err := cli.RevokeToken(tk.ID, t0); err != nil {
				t.Fatal(err)
			}
			if after, err := relay.TokenChanges(); err != nil || after == before {
				t.Fatalf("round %d: token changes %d then %d (%v): a revocation went unseen", round, before, after, err)
			}
			if _, err := relay.AuthToken(bearer, t0); !errcode.Is(err, errcode.PermissionDenied) {
				t.Fatalf("round %d: a revoked token checks as %v", round, err)
			}
		}
	})
}

// TestRetiredCredentialIsCompromisedEverywhere: a device rotates on one
// replica; its old token, presented to the other, marks it compromised,
// and the first replica then refuses even the new token.
func TestRetiredCredentialIsCompromisedEverywhere(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		place := newPlace(t)
		a, b := openT(t, place), openT(t, place)
		dev, old := enrollT(t, a, "", "box")
		next := NewDeviceToken()
		if err := a.RotateDeviceToken(dev.ID, old, next, t0); err != nil {
			t.Fatal(err)
		}
		if r := refusal(t, b, old, t0); r == nil || r.Standing != StandingCompromised || !r.Detected {
			t.Fatalf("the retired token on the other replica: %+v", r)
		}
		if r := refusal(t, a, next, t0); r == nil || r.Standing != StandingCompromised {
			t.Fatalf("the current token after the copy was seen: %+v", r)
		}
	})
}
