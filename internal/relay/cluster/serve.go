package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/nats-io/nats.go"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay"
)

// relayCallBound bounds a call served for another replica that named no
// deadline: the relay's own bound on a forwarded call.
const relayCallBound = limits.ForwardTimeout

const (
	// deadlineSlack is how far past relayCallBound a deadline may lie:
	// the replicas' clocks may differ that much.
	deadlineSlack = limits.GrantClockSkew
	// maxPendingRequests bounds the requests whose parts are still
	// arriving; maxCallBytes one request's arguments (no call carries
	// more than a link frame to its device); maxPendingBytes all of them.
	maxPendingRequests = 1024
	maxCallBytes       = limits.MaxFrameBytes
	maxPendingBytes    = 4 * limits.MaxFrameBytes
	// maxTaken bounds the calls and probes remembered until their
	// deadline; beyond it a new one is refused, never one forgotten.
	maxTaken = 1 << 18
)

// request is a call whose parts are arriving.
type request struct {
	args     []byte
	next     int // the number of the part expected next
	deadline int64
}

// fresh reports whether a request's deadline lies ahead, and no further
// than a call may run; a stale one is dropped and counted.
func (p *Peers) fresh(h *head) bool {
	now := time.Now()
	if h.Deadline <= now.UnixNano() || h.Deadline > now.Add(relayCallBound+deadlineSlack).UnixNano() {
		p.drop(DropStale)
		return false
	}
	return true
}

// take records call (or probe) id as taken until deadline, and reports
// whether it was new; one taken before is dropped as a replay.
func (p *Peers) take(id string, deadline int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.takeLocked(id, deadline)
}

func (p *Peers) takeLocked(id string, deadline int64) bool {
	if _, ok := p.taken[id]; ok {
		p.drop(DropReplayed)
		return false
	}
	if len(p.taken) >= maxTaken {
		now := time.Now().UnixNano()
		for k, d := range p.taken {
			if d < now {
				delete(p.taken, k)
			}
		}
		if len(p.taken) >= maxTaken {
			p.drop(DropOverBound)
			return false
		}
	}
	p.taken[id] = deadline
	return true
}

// receive takes one message of a call for this replica, on the
// subscription's goroutine, and serves the call once its last part is in.
func (p *Peers) receive(here relay.Here, m *nats.Msg) {
	h, data, err := p.seal.open(m.Subject, m.Data)
	if err != nil {
		p.drop(DropForged)
		return
	}
	if !p.fresh(h) {
		return
	}
	args, ok := p.assemble(h, data)
	if !ok || h.More {
		return
	}
	call := relay.Call{Tool: h.Tool, Grant: h.Grant, Arguments: args}
	if h.NoArgs {
		call.Arguments = nil
	}
	go p.serve(here, h, call)
}

// assemble adds one part to its call's arguments and returns them once
// the last part is in, within the bounds on what is buffered. A call
// taken whole before, or a part repeated, is a replay; a part missing
// drops its call (its caller times out).
func (p *Peers) assemble(h *head, data []byte) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.taken[h.Call]; ok {
		p.drop(DropReplayed)
		return nil, false
	}
	r := p.parts[h.Call]
	if r == nil {
		p.expire()
		if h.Part != 1 {
			p.drop(DropReplayed)
			return nil, false
		}
		if len(p.parts) >= maxPendingRequests {
			p.drop(DropOverBound)
			return nil, false
		}
		r = &request{next: 1, deadline: h.Deadline}
		p.parts[h.Call] = r
	}
	switch {
	case h.Part < r.next:
		p.drop(DropReplayed)
		return nil, false
	case h.Part > r.next:
		p.forget(h.Call, r)
		return nil, false
	case len(r.args)+len(data) > maxCallBytes || p.pendingBytes+len(data) > maxPendingBytes:
		p.drop(DropOverBound)
		p.forget(h.Call, r)
		return nil, false
	}
	r.args = append(r.args, data...)
	p.pendingBytes += len(data)
	r.next++
	if h.More {
		return nil, true
	}
	p.forget(h.Call, r)
	if !p.takeLocked(h.Call, h.Deadline) {
		return nil, false
	}
	return r.args, true
}

// forget drops a request whose parts were arriving.
func (p *Peers) forget(id string, r *request) {
	delete(p.parts, id)
	p.pendingBytes -= len(r.args)
}

// expire drops the requests whose deadline passed before their last
// part came (their caller gave up).
func (p *Peers) expire() {
	now := time.Now().UnixNano()
	for id, r := range p.parts {
		if r.deadline < now {
			p.forget(id, r)
		}
	}
}

// answer numbers and seals the messages of one call's answer.
type answer struct {
	p     *Peers
	call  string
	reply string
	mu    sync.Mutex
	seq   int
}

func (a *answer) send(kind string, data []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	a.p.nc.Publish(a.reply, a.p.seal.seal(a.reply, &head{Call: a.call, Kind: kind, Seq: a.seq}, data))
}

// serve carries one call for another replica over this replica's link,
// beating while it runs, until its deadline, its cancellation or Close.
func (p *Peers) serve(here relay.Here, h *head, call relay.Call) {
	ctx, cancel := context.WithDeadline(p.serving, time.Unix(0, h.Deadline))
	defer cancel()
	if h.Cancel != "" {
		if sub, err := p.nc.Subscribe(h.Cancel, func(m *nats.Msg) {
			c, _, err := p.seal.open(m.Subject, m.Data)
			switch {
			case err != nil:
				p.drop(DropForged)
			case c.Call != h.Call:
				p.drop(DropReplayed)
			default:
				cancel()
			}
		}); err == nil {
			defer sub.Unsubscribe()
		}
	}
	a := &answer{p: p, call: h.Call, reply: h.Reply}
	go func() {
		t := time.NewTicker(beatEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				a.send(kindBeat, nil)
			}
		}
	}()
	var progress func([]byte)
	if h.Progress {
		progress = func(params []byte) { a.send(kindProgress, params) }
	}
	res, err := here.CallHere(ctx, h.Device, call, progress)
	cancel()
	var rpcErr *jsonrpc.Error
	switch {
	case err == nil:
		parts := cut(res, p.partBytes())
		for _, part := range parts[:len(parts)-1] {
			a.send(kindPart, part)
		}
		a.send(kindResult, parts[len(parts)-1])
	case errors.Is(err, relay.ErrNoRoute):
		a.send(kindNoRoute, nil)
	case errors.As(err, &rpcErr):
		b, _ := json.Marshal(rpcErr)
		a.send(kindRPCError, b)
	default:
		// Cancelled, past its deadline, or the link ended: the caller
		// has gone or is told the link ended.
		a.send(kindEnded, nil)
	}
}
