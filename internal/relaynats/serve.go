package relaynats

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
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

// maxPendingRequests bounds the requests whose parts are still arriving;
// beyond it the oldest are dropped (their callers time out).
const maxPendingRequests = 1024

// request is a call whose parts are arriving.
type request struct {
	args []byte
}

// receive takes one message of a call for this replica, on the
// subscription's goroutine, and serves the call once its last part is in.
func (p *Peers) receive(here relay.Here, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	p.mu.Lock()
	r := p.parts[m.Reply]
	if r == nil {
		if len(p.parts) >= maxPendingRequests {
			for k := range p.parts {
				delete(p.parts, k)
				break
			}
		}
		r = &request{}
		p.parts[m.Reply] = r
	}
	r.args = append(r.args, m.Data...)
	if m.Header.Get(hMore) == "1" {
		p.mu.Unlock()
		return
	}
	delete(p.parts, m.Reply)
	p.mu.Unlock()
	call := relay.Call{Tool: m.Header.Get(hTool), Grant: m.Header.Get(hGrant), Arguments: r.args}
	if m.Header.Get(hNoArgs) == "1" {
		call.Arguments = nil
	}
	deadline := time.Now().Add(relayCallBound)
	if n, err := strconv.ParseInt(m.Header.Get(hDeadline), 10, 64); err == nil {
		deadline = time.Unix(0, n)
	}
	go p.serve(here, m.Reply, m.Header.Get(hCancel), m.Header.Get(hDevice), call, deadline, m.Header.Get(hProgress) == "1")
}

// answer numbers and sends the messages of one call's answer.
type answer struct {
	nc    *nats.Conn
	reply string
	mu    sync.Mutex
	seq   int
}

func (a *answer) send(kind string, data []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	m := &nats.Msg{Subject: a.reply, Data: data, Header: nats.Header{}}
	m.Header.Set(hKind, kind)
	m.Header.Set(hSeq, strconv.Itoa(a.seq))
	a.nc.PublishMsg(m)
}

// serve carries one call for another replica over this replica's link,
// beating while it runs, until its deadline, its cancellation or Close.
func (p *Peers) serve(here relay.Here, reply, cancelSubject, device string, call relay.Call, deadline time.Time, wantProgress bool) {
	ctx, cancel := context.WithDeadline(p.serving, deadline)
	defer cancel()
	if cancelSubject != "" {
		if sub, err := p.nc.Subscribe(cancelSubject, func(*nats.Msg) { cancel() }); err == nil {
			defer sub.Unsubscribe()
		}
	}
	a := &answer{nc: p.nc, reply: reply}
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
	if wantProgress {
		progress = func(params []byte) { a.send(kindProgress, params) }
	}
	res, err := here.CallHere(ctx, device, call, progress)
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
