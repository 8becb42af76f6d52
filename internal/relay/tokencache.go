package relay

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relaystate"
)

// maxCachedTokens bounds the token checks remembered; past it the cache
// starts over, which costs a store lookup per token and nothing else.
const maxCachedTokens = 1024

// tokenCache remembers a client token's successful check for at most
// limits.ClientTokenRecheck, so the requests of one client do not each
// read the store. A revocation (by `relay token revoke`, another process)
// therefore takes effect within that bound; an expiry at once, since the
// remembered token's expiry is checked on every use. A failed check is
// never remembered.
type tokenCache struct {
	store relaystate.State
	mu    sync.Mutex
	m     map[[sha256.Size]byte]checkedToken
}

type checkedToken struct {
	tok *relaystate.Token
	at  time.Time // when the store last vouched for it
}

func newTokenCache(store relaystate.State) *tokenCache {
	return &tokenCache{store: store, m: map[[sha256.Size]byte]checkedToken{}}
}

// auth is relaystate.Store.AuthToken, answered from a check younger than
// limits.ClientTokenRecheck when there is one.
func (c *tokenCache) auth(bearer string, now time.Time) (*relaystate.Token, error) {
	key := sha256.Sum256([]byte(bearer))
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	// A clock that went back (tests move it) makes a check unusable.
	if ok && !now.Before(e.at) && now.Sub(e.at) < limits.ClientTokenRecheck && now.Before(e.tok.ExpiresAt) {
		return e.tok, nil
	}
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
	c.m[key] = checkedToken{tok: tok, at: now}
	return tok, nil
}
