package transport

import (
	"sync"
	"time"
)

// The server ends' heartbeats go out in batches. Every link sharing a
// heartbeat interval sits in one of the slots of that interval's wheel,
// and the wheel beats one slot's links a slot time: each link every
// interval exactly, its first beat at most an interval after it started.
// With a timer per link the relay woke a thread for nearly every
// heartbeat, and with thousands of idle links switching threads, the
// scheduler and the timers took much of its idle CPU; a batch wakes one
// (BENCHMARKS.md, relay capacity).
const (
	// wheelSlots is how many batches an interval is cut into: at the
	// 15 s interval a batch goes out every 234 ms.
	wheelSlots = 64
	// minWheelSlot bounds how often a wheel turns, whatever the interval
	// (tests use intervals of milliseconds).
	minWheelSlot = 10 * time.Millisecond
)

// wheel beats the links of one heartbeat interval; its goroutine runs
// while it has links.
type wheel struct {
	slot    time.Duration
	mu      sync.Mutex
	slots   []map[*Conn]struct{}
	next    int // the slot the next turn beats
	links   int
	turning bool
}

var wheels = struct {
	mu sync.Mutex
	by map[time.Duration]*wheel
}{by: map[time.Duration]*wheel{}}

// wheelFor returns the wheel of interval, making it if there is none.
func wheelFor(interval time.Duration) *wheel {
	wheels.mu.Lock()
	defer wheels.mu.Unlock()
	w := wheels.by[interval]
	if w == nil {
		w = newWheel(interval)
		wheels.by[interval] = w
	}
	return w
}

func newWheel(interval time.Duration) *wheel {
	n := max(1, min(wheelSlots, int(interval/minWheelSlot)))
	w := &wheel{slot: interval / time.Duration(n), slots: make([]map[*Conn]struct{}, n)}
	for i := range w.slots {
		w.slots[i] = map[*Conn]struct{}{}
	}
	return w
}

// startHeartbeats puts the server end on its interval's wheel.
func (c *Conn) startHeartbeats() {
	if c.role != roleServer || c.opt.HeartbeatInterval <= 0 {
		return
	}
	if wheelFor(c.opt.HeartbeatInterval).add(c) {
		go c.beats.turn()
	}
}

// stopHeartbeats takes the link off its wheel once it has ended: no beat
// runs after it returns.
func (c *Conn) stopHeartbeats() {
	if c.beats != nil {
		c.beats.remove(c)
	}
}

// add puts c in the slot just beaten, which comes round again last: an
// interval from now, less the part of a slot time already gone. It
// reports whether the wheel must start turning.
func (w *wheel) add(c *Conn) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	c.beats, c.beatSlot = w, (w.next+len(w.slots)-1)%len(w.slots)
	w.slots[c.beatSlot][c] = struct{}{}
	w.links++
	start := !w.turning
	w.turning = true
	return start
}

func (w *wheel) remove(c *Conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.slots[c.beatSlot][c]; ok {
		delete(w.slots[c.beatSlot], c)
		w.links--
	}
}

// turn beats the next slot a slot time until the wheel has no links.
func (w *wheel) turn() {
	t := time.NewTicker(w.slot)
	defer t.Stop()
	for range t.C {
		if !w.beatNext() {
			return
		}
	}
}

// beatNext beats the next slot's links; false, and the wheel stops
// turning, when it has none. The beats run under the wheel's lock, so a
// link taken off is never beaten after; a beat only queues a frame,
// never waits.
func (w *wheel) beatNext() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.links == 0 {
		w.turning = false
		return false
	}
	for c := range w.slots[w.next] {
		c.beat()
	}
	w.next = (w.next + 1) % len(w.slots)
	return true
}
