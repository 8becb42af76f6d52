package authz

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// numbered is a grant of principal numbered seq by minter, issued at iat
// for the usual 60 s (dead, for the memory, 90 s after iat).
func numbered(minter string, seq uint64, principal string, iat time.Time) *Grant {
	g := grantOf(fmt.Sprintf("%s-%d", minter, seq), principal, iat)
	g.Minter, g.Seq = minter, seq
	return g
}

const overtaken = "grant_invalid: grant arrived after 65536 newer ones of its relay; retry"

// TestAMillionNumberedGrantsWithinTwoMinutes: one relay process mints a
// million grants for four principals within two minutes, at over 8,000 a
// second (40 times what the per-principal memory of grant IDs let one
// principal hold), and they arrive somewhat out of order, as concurrent
// calls do. Each is accepted once; each replayed at once, and one taken
// earlier replayed at random, is refused; and the memory is one window
// of 8 KiB, not a million IDs.
func TestAMillionNumberedGrantsWithinTwoMinutes(t *testing.T) {
	const n = 1_000_000
	u := NewUsedGrants()
	r := rand.New(rand.NewPCG(1, 2))
	principals := []string{"alice", "bob", "carol", "dave"}
	order := make([]uint64, 0, 512)
	var taken []uint64
	for base := uint64(1); base <= n; base += 512 {
		// Each block of 512 arrives shuffled.
		order = order[:0]
		for s := base; s < base+512 && s <= n; s++ {
			order = append(order, s)
		}
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, s := range order {
			at := t0.Add(time.Duration(s) * 120 * time.Second / n)
			g := numbered("00112233aabbccdd", s, principals[s%4], at)
			if err := u.Use(g, at); err != nil {
				t.Fatalf("grant %d at t0+%v: %v", s, at.Sub(t0), err)
			}
			if err := u.Use(g, at); err == nil || errcode.From(err).Code != errcode.GrantInvalid {
				t.Fatalf("grant %d replayed at once: %v", s, err)
			}
			taken = append(taken, s)
			old := taken[r.IntN(len(taken))]
			if err := u.Use(numbered("00112233aabbccdd", old, principals[old%4], t0), at); err == nil || errcode.From(err).Code != errcode.GrantInvalid {
				t.Fatalf("grant %d replayed after %d: accepted", old, s)
			}
		}
	}
	if len(u.seen) != 0 || len(u.byDeath) != 0 || len(u.windows) != 1 {
		t.Fatalf("memory: %d IDs, %d windows; want none and one", len(u.seen), len(u.windows))
	}
}

// TestTheWindowsEdge: a number as far below the highest as the window
// minus one is still told used from unused; one the window's width below
// is refused as overtaken, saying so; a jump forward frees the numbers it
// passes over, and one of the window's width forgets them all.
func TestTheWindowsEdge(t *testing.T) {
	const m, size = "0123456789abcdef", limits.GrantSequenceWindow
	u := NewUsedGrants()
	for s := uint64(1); s <= 10; s++ {
		use(t, u, numbered(m, s, "p", t0), t0, "")
	}
	use(t, u, numbered(m, 10+size, "p", t0), t0, "")
	// 10 is now the window's width below the highest, 11 one less.
	use(t, u, numbered(m, 10, "p", t0), t0, overtaken)
	use(t, u, numbered(m, 11, "p", t0), t0, "")
	use(t, u, numbered(m, 11, "p", t0), t0, replayed)
	use(t, u, numbered(m, 10+size-1, "p", t0), t0, "")
	use(t, u, numbered(m, 10+size, "p", t0), t0, replayed)
	// A jump of exactly the window's width: only the new number is used,
	// and the last highest is overtaken, not called used.
	high := uint64(10 + 2*size)
	use(t, u, numbered(m, high, "p", t0), t0, "")
	for _, s := range []uint64{high - size + 1, high - size + 2, high - size + 3, high - 1} {
		use(t, u, numbered(m, s, "p", t0), t0, "")
		use(t, u, numbered(m, s, "p", t0), t0, replayed)
	}
	use(t, u, numbered(m, high-size, "p", t0), t0, overtaken)
	// A step of one keeps the slots it does not pass; a jump of three
	// frees the two it passes over, used a window ago.
	use(t, u, numbered(m, high+1, "p", t0), t0, "")
	use(t, u, numbered(m, high-size+1, "p", t0), t0, overtaken)
	use(t, u, numbered(m, high-size+2, "p", t0), t0, replayed)
	use(t, u, numbered(m, high+4, "p", t0), t0, "")
	use(t, u, numbered(m, high+2, "p", t0), t0, "")
	use(t, u, numbered(m, high+3, "p", t0), t0, "")
	use(t, u, numbered(m, high+3, "p", t0), t0, replayed)
	use(t, u, numbered(m, high, "p", t0), t0, replayed)
}

// TestAMintersWindowGoesWhenItsGrantsAreDead: a window is kept while any
// grant it took can verify (its expiry plus the skew: 90 s after issue),
// so a replay is refused up to then, and is gone a second later; another
// minter's window is its own.
func TestAMintersWindowGoesWhenItsGrantsAreDead(t *testing.T) {
	u := NewUsedGrants()
	a, b := "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
	use(t, u, numbered(a, 1, "p", t0), t0, "")
	use(t, u, numbered(a, 2, "p", t0.Add(10*time.Second)), t0.Add(10*time.Second), "")
	use(t, u, numbered(b, 1, "p", t0), t0, "")
	use(t, u, numbered(a, 1, "p", t0), t0.Add(90*time.Second), replayed)
	use(t, u, numbered(b, 2, "p", t0.Add(91*time.Second)), t0.Add(91*time.Second), "")
	if len(u.windows) != 2 {
		t.Fatalf("%d windows at t0+91s, want a's (its second grant lives) and b's", len(u.windows))
	}
	use(t, u, numbered(a, 2, "p", t0.Add(10*time.Second)), t0.Add(100*time.Second), replayed)
	use(t, u, numbered(b, 3, "p", t0.Add(101*time.Second)), t0.Add(101*time.Second), "")
	if _, ok := u.windows[a]; ok || len(u.windows) != 1 {
		t.Fatalf("a's window outlived its grants: %d windows", len(u.windows))
	}
}

// TestMintersAreBounded: windows for 64 relay processes whose grants live
// at once, the 65th refused (saying so, to be retried) without taking
// room; once the first's grants are dead, a new one is taken.
func TestMintersAreBounded(t *testing.T) {
	u := NewUsedGrants()
	minter := func(i int) string { return fmt.Sprintf("%016x", i) }
	for i := range limits.MaxGrantMinters {
		at := t0.Add(time.Duration(i) * time.Second)
		use(t, u, numbered(minter(i), 1, "p", at), at, "")
	}
	full := "grant_invalid: too many relays minting grants at once (64); retry shortly"
	use(t, u, numbered(minter(64), 1, "p", t0.Add(63*time.Second)), t0.Add(63*time.Second), full)
	// A grant without a number still has its own memory.
	use(t, u, grantOf("plain", "p", t0.Add(63*time.Second)), t0.Add(63*time.Second), "")
	use(t, u, numbered(minter(64), 1, "p", t0.Add(90*time.Second)), t0.Add(90*time.Second), full)
	use(t, u, numbered(minter(64), 1, "p", t0.Add(91*time.Second)), t0.Add(91*time.Second), "")
	if len(u.windows) != limits.MaxGrantMinters {
		t.Fatalf("%d windows, want %d", len(u.windows), limits.MaxGrantMinters)
	}
}

// TestOnePrincipalsNumberedGrantsAreNotCapped: a principal's numbered
// grants are not held to its share of the memory of grant IDs: 30,000 of
// one principal within a second are all accepted.
func TestOnePrincipalsNumberedGrantsAreNotCapped(t *testing.T) {
	u := NewUsedGrants()
	for s := uint64(1); s <= 30_000; s++ {
		use(t, u, numbered("cccccccccccccccc", s, "alice", t0), t0, "")
	}
}

// TestNumberedGrantsRoundTrip: a minter numbers its grants 1, 2, 3… under
// one random ID, another minter under another; a numbered grant verifies
// with its number, and a grant whose number is malformed (a minter without
// a number or the reverse, a minter not 8 bytes of lower-case hex) is
// refused as malformed.
func TestNumberedGrantsRoundTrip(t *testing.T) {
	k := newKey(t)
	m1, err := NewMinter()
	if err != nil {
		t.Fatal(err)
	}
	m2, _ := NewMinter()
	if m1.id == m2.id || len(m1.id) != 16 {
		t.Fatalf("minter IDs %q and %q", m1.id, m2.id)
	}
	for want := uint64(1); want <= 3; want++ {
		tok, err := MintNumbered(k, m1, dev, tool, who, "", t0)
		if err != nil {
			t.Fatal(err)
		}
		c, err := VerifyGrant(pub(k), tok, dev, tool, nil, t0)
		if err != nil {
			t.Fatal(err)
		}
		if c.Minter != m1.id || c.Seq != want {
			t.Fatalf("grant %d numbered %s/%d", want, c.Minter, c.Seq)
		}
	}
	for _, bad := range []struct {
		minter string
		seq    uint64
	}{
		{"0011223344556677", 0},
		{"", 7},
		{"00112233445566", 7},
		{"001122334455667788", 7},
		{"00112233AABBCCDD", 7},
		{"zz112233aabbccdd", 7},
	} {
		c := validGrant()
		c.Minter, c.Seq = bad.minter, bad.seq
		wantReject(t, fmt.Sprintf("minter %q seq %d", bad.minter, bad.seq), k, signRaw(k, grantJSON(t, c)), t0, "grant is malformed")
	}
	if _, err := MintNumbered(k, m1, "", tool, who, "", t0); err == nil || !strings.Contains(err.Error(), "needs a device") {
		t.Fatalf("a numbered grant without a device: %v", err)
	}
}
