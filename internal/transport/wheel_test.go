package transport

import (
	"testing"
	"time"
)

// pendingBeats is how many heartbeats c sent that nobody answered.
func pendingBeats(c *Conn) int {
	c.pendMu.Lock()
	defer c.pendMu.Unlock()
	return len(c.pending)
}

// TestWheelBeatsEveryLinkOnceAnInterval turns a wheel by hand: every link
// on it is beaten once every turn of all its slots, whatever slot it
// joined at, the first time within one such turn of joining, and never
// once it is taken off.
func TestWheelBeatsEveryLinkOnceAnInterval(t *testing.T) {
	w := newWheel(15 * time.Second)
	n := len(w.slots)
	if n != wheelSlots || w.slot*time.Duration(n) != 15*time.Second {
		t.Fatalf("%d slots of %v", n, w.slot)
	}
	conn := func() *Conn {
		sws, peer := pipeWS(t)
		drain(peer) // never answers
		c := Server(sws, secret, noBeat)
		t.Cleanup(func() { c.Close() })
		return c
	}
	type joined struct {
		c    *Conn
		turn int
	}
	var links []joined
	turns := 0
	for _, at := range []int{0, 0, 1, 17, n - 1, n, 2*n + 5} {
		for ; turns < at; turns++ {
			w.beatNext()
		}
		c := conn()
		w.add(c)
		links = append(links, joined{c, turns})
	}
	gone := links[1].c
	for ; turns < 5*n; turns++ {
		if turns == 3*n {
			w.remove(gone)
		}
		for _, l := range links {
			if l.c == gone && turns >= 3*n {
				continue
			}
			// Beaten at the n-th turn after joining, then every n turns.
			if got, want := pendingBeats(l.c), (turns-l.turn)/n; got != want {
				t.Fatalf("a link that joined at turn %d was beaten %d times by turn %d, want %d", l.turn, got, turns, want)
			}
		}
		w.beatNext()
	}
	if got := pendingBeats(gone); got != 3 {
		t.Fatalf("the link taken off at turn %d was beaten %d times, want 3", 3*n, got)
	}
	for _, l := range links {
		w.remove(l.c)
	}
	if w.beatNext() || w.turning {
		t.Fatal("a wheel without links keeps turning")
	}
}

// TestWheelSlotsNeverLengthenTheInterval: for intervals that do not
// divide into slots, a turn of all slots is at most the interval, and
// short intervals get fewer slots rather than faster turns.
func TestWheelSlotsNeverLengthenTheInterval(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, 25 * time.Millisecond, 999 * time.Millisecond, 15 * time.Second, 15*time.Second + 7} {
		w := newWheel(d)
		if round := w.slot * time.Duration(len(w.slots)); round > d || round < d-time.Duration(len(w.slots)) {
			t.Errorf("interval %v: %d slots of %v", d, len(w.slots), w.slot)
		}
		if len(w.slots) > 1 && w.slot < minWheelSlot {
			t.Errorf("interval %v: slots of %v", d, w.slot)
		}
	}
}
