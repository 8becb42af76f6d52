package authz

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// GrantSequenceCapability is the experimental MCP capability an agent's
// server announces when it takes sequenced grants: the relay numbers
// grants only for such agents, since an earlier agent's strict decoder
// refuses a claim it does not know.
const GrantSequenceCapability = "commandcore/grant-sequence"

// minterBytes is the size of a minter's random ID before hex encoding.
const minterBytes = 8

// Minter numbers the grants one relay process mints: its own random ID,
// then 1, 2, 3… An agent refuses a replay of a numbered grant with a
// window per minter, as IPsec's anti-replay does (RFC 4303 3.4.3): the
// highest number seen and which of the limits.GrantSequenceWindow before
// it were used. That costs the same memory at any call rate, where
// remembering every grant's ID until it dies caps how many calls a minute
// a device can take.
type Minter struct {
	id   string
	last atomic.Uint64
}

// NewMinter returns a minter with a fresh random ID: each relay process
// has its own, so no two mint the same number under one ID.
func NewMinter() (*Minter, error) {
	var b [minterBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("grant minter id: %w", err)
	}
	return &Minter{id: hex.EncodeToString(b[:])}, nil
}

// next is the minter's ID and its next number.
func (m *Minter) next() (string, uint64) { return m.id, m.last.Add(1) }

// window is what an agent keeps of one minter: the highest number it
// accepted, which of the window's numbers up to it were used (bit n mod
// the window), and the latest expiry among them, after which every grant
// the minter numbered up to high is dead and the window can go.
type window struct {
	high uint64
	used [limits.GrantSequenceWindow / 64]uint64
	dead int64
}

// take records seq as used, or says why it cannot be: used already, or so
// far below the highest that the window no longer tells.
func (w *window) take(seq uint64) error {
	const size = limits.GrantSequenceWindow
	switch {
	case seq > w.high:
		if seq-w.high >= size {
			w.used = [size / 64]uint64{}
		} else {
			for n := w.high + 1; n < seq; n++ {
				w.used[n%size/64] &^= 1 << (n % 64)
			}
		}
		w.high = seq
	case w.high-seq >= size:
		return errcode.New(errcode.GrantInvalid, "grant arrived after %d newer ones of its relay; retry", size)
	case w.used[seq%size/64]&(1<<(seq%64)) != 0:
		return invalidGrant("grant was already used (each call needs a fresh grant)")
	}
	w.used[seq%size/64] |= 1 << (seq % 64)
	return nil
}
