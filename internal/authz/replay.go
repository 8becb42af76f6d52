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
// A numbered grant (Minter) is checked against its minter's window, the
// same few kilobytes at any call rate. A grant without a number, from a
// relay that does not number them, is remembered by its ID until it dies;
// each principal may hold only a part of that memory, so that one client
// flooding the device with calls is refused alone while every other
// principal's calls still find room.
type UsedGrants struct {
	mu           sync.Mutex
	max          int
	perPrincipal int
	seen         map[string]bool // grant IDs remembered
	held         map[string]int  // principal -> how many of seen are its
	byDeath      deaths
	windows      map[string]*window // minter ID -> its window
}

// NewUsedGrants returns an empty memory of at most
// limits.MaxGrantsRemembered grant IDs, of which at most
// limits.MaxGrantsRememberedPerPrincipal are one principal's.
func NewUsedGrants() *UsedGrants {
	return newUsedGrants(limits.MaxGrantsRemembered, limits.MaxGrantsRememberedPerPrincipal)
}

func newUsedGrants(max, perPrincipal int) *UsedGrants {
	return &UsedGrants{max: max, perPrincipal: perPrincipal, seen: map[string]bool{}, held: map[string]int{}, windows: map[string]*window{}}
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
	if c.Minter != "" {
		return u.useNumbered(c, dead)
	}
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

// useNumbered takes c's number in its minter's window, a new window for a
// minter not seen while one of its grants lived. Windows are bounded in
// number (limits.MaxGrantMinters), each minter a relay process that holds
// the signing key; a window goes once every grant it took is dead, when
// none of them can be replayed any more.
func (u *UsedGrants) useNumbered(c *Grant, dead int64) error {
	w := u.windows[c.Minter]
	if w == nil {
		if len(u.windows) >= limits.MaxGrantMinters {
			return errcode.New(errcode.GrantInvalid, "too many relays minting grants at once (%d); retry shortly", limits.MaxGrantMinters)
		}
		w = &window{}
		u.windows[c.Minter] = w
	}
	if err := w.take(c.Seq); err != nil {
		return err
	}
	w.dead = max(w.dead, dead)
	return nil
}

// forget drops the grants that can no longer verify at now, soonest dead
// first, so that each call costs only what it frees, and the windows of
// minters whose grants are all dead.
func (u *UsedGrants) forget(now int64) {
	for id, w := range u.windows {
		if now > w.dead {
			delete(u.windows, id)
		}
	}
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
