package authz

import (
	"container/heap"
	"sync"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// UsedGrants remembers the IDs of grants already used, until they expire,
// so a grant is good for one call only. It is held in memory:
// after an agent restart a captured grant could be replayed at most once
// more within its life (about a minute), and only over a link the device
// token authenticated.
//
// Each principal may hold only a part of the memory, so that one client
// flooding the device with calls is refused alone while every other
// principal's calls still find room.
type UsedGrants struct {
	mu           sync.Mutex
	max          int
	perPrincipal int
	seen         map[string]bool // grant IDs remembered
	held         map[string]int  // principal -> how many of seen are its
	byDeath      deaths
}

// NewUsedGrants returns an empty memory of at most
// limits.MaxGrantsRemembered grant IDs, of which at most
// limits.MaxGrantsRememberedPerPrincipal are one principal's.
func NewUsedGrants() *UsedGrants {
	return newUsedGrants(limits.MaxGrantsRemembered, limits.MaxGrantsRememberedPerPrincipal)
}

func newUsedGrants(max, perPrincipal int) *UsedGrants {
	return &UsedGrants{max: max, perPrincipal: perPrincipal, seen: map[string]bool{}, held: map[string]int{}}
}

// Use records c's ID as used at now, or refuses it with grant_invalid when
// it was used before. When c's principal already holds its share of live
// grants, or the memory is full of them, a new one is refused too:
// forgetting a live ID would let it be replayed.
func (u *UsedGrants) Use(c *Grant, now time.Time) error {
	dead := c.Expires + int64(limits.GrantClockSkew/time.Second)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.forget(now.Unix())
	if u.seen[c.ID] {
		return invalidGrant("grant was already used (each call needs a fresh grant)")
	}
	if u.held[c.Principal] >= u.perPrincipal {
		return errcode.New(errcode.GrantInvalid, "too many grants of this principal in use at once (%d); retry shortly", u.perPrincipal)
	}
	if len(u.seen) >= u.max {
		return errcode.New(errcode.GrantInvalid, "too many grants in use at once; retry shortly")
	}
	u.seen[c.ID] = true
	u.held[c.Principal]++
	heap.Push(&u.byDeath, used{id: c.ID, principal: c.Principal, dead: dead})
	return nil
}

// forget drops the grants that can no longer verify at now, soonest dead
// first, so that each call costs only what it frees.
func (u *UsedGrants) forget(now int64) {
	for len(u.byDeath) > 0 && now > u.byDeath[0].dead {
		g := heap.Pop(&u.byDeath).(used)
		delete(u.seen, g.id)
		if u.held[g.principal]--; u.held[g.principal] == 0 {
			delete(u.held, g.principal)
		}
	}
}

// used is one remembered grant: its ID, its principal and the unix second
// after which it is dead.
type used struct {
	id, principal string
	dead          int64
}

// deaths is a min-heap of used grants by the second they die
// (container/heap).
type deaths []used

func (d deaths) Len() int           { return len(d) }
func (d deaths) Less(i, j int) bool { return d[i].dead < d[j].dead }
func (d deaths) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deaths) Push(x any)        { *d = append(*d, x.(used)) }
func (d *deaths) Pop() any {
	old := *d
	g := old[len(old)-1]
	*d = old[:len(old)-1]
	return g
}
