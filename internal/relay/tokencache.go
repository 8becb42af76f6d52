package relay

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/commandcore/commandcore/internal/relay/store"
)

// maxCachedTokens bounds the token checks remembered; past it the cache
// starts over, which costs a store lookup per token and nothing else.
const maxCachedTokens = 1024

// tokenCache remembers a client token's successful check while the
// store's token-change counter stays what it read before the check, so
// the requests of one client each read one integer, not the token. A
// revocation (by `relay token revoke`, another process) moves the counter
// before it returns, so the next request checks the token again and is
// refused; an expiry is refused at once, since the remembered token's
// expiry is checked on every use. A failed check is never remembered.
type tokenCache struct {
	store store.State
	mu    sync.Mutex
	m     map[[sha256.Size]byte]checkedToken
}

type checkedToken struct {
	tok     *store.Token
	changes int64 // the counter as read before the store vouched for it
}

func newTokenCache(store store.State) *tokenCache {
	return &tokenCache{store: store, m: map[[sha256.Size]byte]checkedToken{}}
}

// auth is store.State.AuthToken, answered from a check no token
// change has happened since when there is one. A counter that cannot be
// read refuses the request: nothing vouches for the remembered check.
func (c *tokenCache) auth(bearer string, now time.Time) (*store.Token, error) {
	changes, err := c.store.TokenChanges()
	if err != nil {
		return nil, err
	}
	key := sha256.Sum256([]byte(bearer))
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok && e.changes == changes && now.Before(e.tok.ExpiresAt) {
		return e.tok, nil
	}
	// Read after the counter: a change committed between the two reads
	// either shows in this check or moves the counter past what is kept.
	tok, err := c.store.AuthToken(bearer, now)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		delete(c.m, key)
		return nil, err
	}
	if len(c.m) >= maxCachedTokens {
		clear(c.m)
	}
	c.m[key] = checkedToken{tok: tok, changes: changes}
	return tok, nil
}
