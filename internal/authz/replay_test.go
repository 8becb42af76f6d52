package authz

import (
	"strconv"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// grantOf is a grant of principal issued at iat for the usual 60 s: it is
// dead, for the memory, 90 s after iat (its life plus the 30 s skew).
func grantOf(id, principal string, iat time.Time) *Grant {
	return &Grant{Device: "d", Tool: "t", Principal: principal, IssuedAt: iat.Unix(), Expires: iat.Add(60 * time.Second).Unix(), ID: id}
}

const (
	replayed        = "grant_invalid: grant was already used (each call needs a fresh grant)"
	memoryFull      = "grant_invalid: too many grants in use at once; retry shortly"
	principalIsFull = "grant_invalid: too many grants of this principal in use at once (3); retry shortly"
)

// use calls u.Use and checks its answer: nil for want "", else an error
// of that text (code and message).
func use(t *testing.T, u *UsedGrants, g *Grant, at time.Time, want string) {
	t.Helper()
	err := u.Use(g, at)
	switch {
	case want == "" && err != nil:
		t.Fatalf("%s of %s at t0+%v: %v, want accepted", g.ID, g.Principal, at.Sub(t0), err)
	case want != "" && (err == nil || err.Error() != want || errcode.From(err).Code != errcode.GrantInvalid):
		t.Fatalf("%s of %s at t0+%v: %v, want %q", g.ID, g.Principal, at.Sub(t0), err, want)
	}
}

// remembered checks what the memory holds: how many grant IDs, and of
// which principals how many (none listed that holds none).
func remembered(t *testing.T, u *UsedGrants, ids int, held map[string]int) {
	t.Helper()
	if len(u.seen) != ids || len(u.byDeath) != ids || len(u.held) != len(held) {
		t.Fatalf("remembers %d IDs (%d by death), principals %v; want %d, %v", len(u.seen), len(u.byDeath), u.held, ids, held)
	}
	for p, n := range held {
		if u.held[p] != n {
			t.Fatalf("principal %s holds %d, want %d (all: %v)", p, u.held[p], n, u.held)
		}
	}
}

func TestUsedGrantsRefuseAReplayUntilTheGrantIsDead(t *testing.T) {
	u := newUsedGrants(10, 10)
	a := grantOf("a", "p", t0)
	use(t, u, a, t0, "")
	use(t, u, a, t0, replayed)
	use(t, u, a, t0.Add(89*time.Second), replayed)
	// At the instant of its death a grant can still verify (expiry plus
	// skew is not past), so it is still remembered.
	use(t, u, a, t0.Add(90*time.Second), replayed)
	remembered(t, u, 1, map[string]int{"p": 1})
	// A second later it can verify no more, and is forgotten.
	use(t, u, grantOf("b", "q", t0.Add(91*time.Second)), t0.Add(91*time.Second), "")
	remembered(t, u, 1, map[string]int{"q": 1})
}

// TestOnePrincipalsFloodRefusesOnlyItself: a principal may hold its share
// of the memory and no more (cap-1, cap accepted, cap+1 refused, saying
// so); meanwhile another principal's grants are accepted.
func TestOnePrincipalsFloodRefusesOnlyItself(t *testing.T) {
	u := newUsedGrants(10, 3)
	use(t, u, grantOf("a1", "alice", t0), t0, "")
	use(t, u, grantOf("a2", "alice", t0), t0, "")
	use(t, u, grantOf("a3", "alice", t0), t0, "")
	remembered(t, u, 3, map[string]int{"alice": 3})
	use(t, u, grantOf("a4", "alice", t0), t0, principalIsFull)
	use(t, u, grantOf("a5", "alice", t0), t0.Add(90*time.Second), principalIsFull)
	// A replay is still called a replay, full or not.
	use(t, u, grantOf("a1", "alice", t0), t0, replayed)
	use(t, u, grantOf("b1", "bob", t0), t0, "")
	use(t, u, grantOf("b2", "bob", t0), t0.Add(90*time.Second), "")
	remembered(t, u, 5, map[string]int{"alice": 3, "bob": 2})
}

// TestAFloodAtTheAgentsBoundsLocksOutOnlyTheFlooder: with the bounds the
// agent runs with, a principal using grants as fast as it can is refused
// once it holds its share, and only then; another principal's next grant
// is still accepted.
func TestAFloodAtTheAgentsBoundsLocksOutOnlyTheFlooder(t *testing.T) {
	u := NewUsedGrants()
	var refused error
	n := 0
	for ; n <= limits.MaxGrantsRemembered && refused == nil; n++ {
		refused = u.Use(grantOf(strconv.Itoa(n), "alice", t0), t0)
	}
	if n-1 != limits.MaxGrantsRememberedPerPrincipal || errcode.From(refused).Code != errcode.GrantInvalid {
		t.Fatalf("alice was refused after %d grants (%v), want after %d", n-1, refused, limits.MaxGrantsRememberedPerPrincipal)
	}
	if err := u.Use(grantOf("bob's", "bob", t0), t0); err != nil {
		t.Fatalf("alice's flood locked bob out: %v", err)
	}
}

// TestFullMemoryRefusesEveryNewGrant: the memory as a whole has a bound
// too (one ID below it accepted, at it refused, whoever asks), and the
// grants that die make room again.
func TestFullMemoryRefusesEveryNewGrant(t *testing.T) {
	u := newUsedGrants(4, 3)
	use(t, u, grantOf("a1", "alice", t0), t0, "")
	use(t, u, grantOf("a2", "alice", t0), t0, "")
	use(t, u, grantOf("b1", "bob", t0), t0, "")
	use(t, u, grantOf("b2", "bob", t0), t0, "")
	remembered(t, u, 4, map[string]int{"alice": 2, "bob": 2})
	// Full of live grants: a new one is refused rather than an old one
	// forgotten while it could still verify.
	use(t, u, grantOf("b3", "bob", t0), t0.Add(90*time.Second), memoryFull)
	use(t, u, grantOf("c1", "carol", t0), t0.Add(90*time.Second), memoryFull)
	use(t, u, grantOf("c1", "carol", t0), t0.Add(91*time.Second), "")
	remembered(t, u, 1, map[string]int{"carol": 1})
}

// TestExpiryFreesAPrincipalsShareAtTheExactInstant: each grant frees its
// principal's place the second after its death (not at it), soonest dead
// first whatever order they were used in, and a principal that holds
// nothing more is forgotten altogether.
func TestExpiryFreesAPrincipalsShareAtTheExactInstant(t *testing.T) {
	u := newUsedGrants(10, 3)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// A grant issued at second s is dead at s+90.
	use(t, u, grantOf("late", "alice", at(20)), at(0), "")
	use(t, u, grantOf("soon", "alice", at(0)), at(0), "")
	use(t, u, grantOf("mid", "alice", at(10)), at(0), "")
	use(t, u, grantOf("x1", "alice", at(90)), at(90), principalIsFull)
	use(t, u, grantOf("x1", "alice", at(91)), at(91), "") // "soon" died at 90
	use(t, u, grantOf("x2", "alice", at(91)), at(91), principalIsFull)
	use(t, u, grantOf("x2", "alice", at(100)), at(100), principalIsFull)
	use(t, u, grantOf("x2", "alice", at(101)), at(101), "") // "mid" died at 100
	remembered(t, u, 3, map[string]int{"alice": 3})
	use(t, u, grantOf("b1", "bob", at(111)), at(111), "") // "late" died at 110
	remembered(t, u, 3, map[string]int{"alice": 2, "bob": 1})
	// x1 and x2 died at 181 and 191: alice holds nothing any more.
	use(t, u, grantOf("b2", "bob", at(192)), at(192), "")
	remembered(t, u, 2, map[string]int{"bob": 2})
}

func TestNewUsedGrantsHasTheBoundsOfLimits(t *testing.T) {
	u := NewUsedGrants()
	if u.max != limits.MaxGrantsRemembered || u.perPrincipal != limits.MaxGrantsRememberedPerPrincipal {
		t.Fatalf("bounds %d, %d per principal", u.max, u.perPrincipal)
	}
	remembered(t, u, 0, map[string]int{})
}
