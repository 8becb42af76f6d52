package authz

import (
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
type UsedGrants struct {
	mu   sync.Mutex
	max  int
	seen map[string]int64 // grant ID -> the unix second after which it is dead
}

// NewUsedGrants returns an empty memory of at most max grant IDs; max <= 0
// means limits.MaxGrantsRemembered.
func NewUsedGrants(max int) *UsedGrants {
	if max <= 0 {
		max = limits.MaxGrantsRemembered
	}
	return &UsedGrants{max: max, seen: map[string]int64{}}
}

// Use records c's ID as used at now, or refuses it with grant_invalid when
// it was used before. When the memory is full of live grants a new one is
// refused too: forgetting a live ID would let it be replayed.
func (u *UsedGrants) Use(c *Grant, now time.Time) error {
	dead := c.Expires + int64(limits.GrantClockSkew/time.Second)
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.seen[c.ID]; ok {
		return invalidGrant("grant was already used (each call needs a fresh grant)")
	}
	if len(u.seen) >= u.max {
		u.prune(now.Unix())
		if len(u.seen) >= u.max {
			return errcode.New(errcode.GrantInvalid, "too many grants in use at once; retry shortly")
		}
	}
	u.seen[c.ID] = dead
	return nil
}

// prune forgets the grants that can no longer verify at now.
func (u *UsedGrants) prune(now int64) {
	for id, dead := range u.seen {
		if now > dead {
			delete(u.seen, id)
		}
	}
}
