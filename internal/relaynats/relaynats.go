// Package relaynats joins relay replicas through NATS (docs/scaling.md): a
// call that reaches one replica for a device whose link another holds goes
// to that replica as NATS messages, and the device's progress and answer
// come back the same way, in order, as the device encoded them. It is the
// relay's Peers: it carries bytes and decodes none of the call.
//
// Each replica subscribes to two subjects of its own: <prefix>.<id>.call
// and <prefix>.<id>.alive. A call is one or more messages on the first
// (headers name the device, tool, grant, deadline and a subject for its
// cancellation; the body is the client's arguments, cut at the server's
// payload bound), answered on the request's reply subject by numbered
// messages: progress, a beat while the call runs, then the result (cut
// likewise) or why there is none. A gap in the numbers, or silence past
// a few beats, fails the call with unavailable, never with a wrong answer.
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

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/relay"
)

// SubjectPrefix starts every subject the replicas use.
const SubjectPrefix = "commandcore.replica"

const (
	// beatEvery is how often a replica serving a call says it still is;
	// silentBeats of them missed and the caller gives up.
	beatEvery   = 2 * time.Second
	silentBeats = 3
	// pendingMessages and pendingBytes bound what one call's answer may
	// queue in the caller before it is read: far above what a client
	// reading its stream lets pile up.
	pendingMessages = 1 << 16
	pendingBytes    = 256 << 20
	// partHeadroom is left in each message for its headers.
	partHeadroom = 4 << 10
)

// Headers of the messages.
const (
	hDevice   = "Cc-Device"
	hTool     = "Cc-Tool"
	hGrant    = "Cc-Grant"
	hDeadline = "Cc-Deadline"
	hCancel   = "Cc-Cancel"
	hProgress = "Cc-Progress"
	hMore     = "Cc-More"
	hNoArgs   = "Cc-No-Arguments"
	hKind     = "Cc-Kind"
	hSeq      = "Cc-Seq"
)

// The kinds of answer message.
const (
	kindProgress = "progress"
	kindBeat     = "beat"
	kindPart     = "part"
	kindResult   = "result"
	kindRPCError = "rpc-error"
	kindNoRoute  = "no-route"
	kindEnded    = "ended"
)

var _ relay.Peers = (*Peers)(nil)

// Peers reaches the other replicas over one NATS connection.
type Peers struct {
	nc *nats.Conn

	mu   sync.Mutex
	subs []*nats.Subscription
	// parts are the requests still arriving, by reply subject.
	parts map[string]*request
	// serving ends the calls this replica serves for others, on Close.
	serving context.Context
	stop    context.CancelFunc
}

// ErrUnreachable is Connect's failure; it never repeats the URL, which
// may hold credentials.
var ErrUnreachable = errcode.New(errcode.Unavailable, "cannot reach NATS at --nats")

// Connect dials the NATS server at url as replica name, reconnecting for
// as long as the replica runs once it has connected.
func Connect(url, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name("commandcore relay "+name), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "cannot reach NATS at --nats")
	}
	return nc, nil
}

// New returns the peers over nc; Serve starts answering for this replica.
func New(nc *nats.Conn) *Peers {
	ctx, stop := context.WithCancel(context.Background())
	return &Peers{nc: nc, parts: map[string]*request{}, serving: ctx, stop: stop}
}

func callSubject(replica string) string  { return SubjectPrefix + "." + replica + ".call" }
func aliveSubject(replica string) string { return SubjectPrefix + "." + replica + ".alive" }

// Serve answers the other replicas' calls and link probes for replica,
// through here, until Close.
func (p *Peers) Serve(replica string, here relay.Here) error {
	calls, err := p.nc.Subscribe(callSubject(replica), func(m *nats.Msg) { p.receive(here, m) })
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "cannot subscribe on NATS")
	}
	alive, err := p.nc.Subscribe(aliveSubject(replica), func(m *nats.Msg) {
		// Answered off the subscription's goroutine: the probe waits.
		go func() {
			ctx, cancel := context.WithTimeout(p.serving, beatEvery)
			defer cancel()
			answer := "0"
			if here.LinkAnswersHere(ctx, m.Header.Get(hDevice)) {
				answer = "1"
			}
			m.Respond([]byte(answer))
		}()
	})
	if err != nil {
		calls.Unsubscribe()
		return errcode.Wrap(errcode.Unavailable, err, "cannot subscribe on NATS")
	}
	p.mu.Lock()
	p.subs = append(p.subs, calls, alive)
	p.mu.Unlock()
	// The subscriptions reach the server before the replica says it
	// holds links.
	if err := p.nc.Flush(); err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "cannot subscribe on NATS")
	}
	return nil
}

// Close stops answering and ends the calls served for others.
func (p *Peers) Close() {
	p.mu.Lock()
	subs := p.subs
	p.subs = nil
	p.mu.Unlock()
	for _, s := range subs {
		s.Unsubscribe()
	}
	p.stop()
}

// LinkAnswers asks replica whether its link to device answers.
func (p *Peers) LinkAnswers(ctx context.Context, replica, device string) bool {
	m := nats.NewMsg(aliveSubject(replica))
	m.Header.Set(hDevice, device)
	r, err := p.nc.RequestMsgWithContext(ctx, m)
	return err == nil && string(r.Data) == "1"
}

// errSilent: the replica holding the link stopped answering mid-call.
var errSilent = errcode.New(errcode.Unavailable, "the relay replica holding the device's link stopped answering")

// errLost: an answer message went missing between the replicas.
var errLost = errcode.New(errcode.Unavailable, "part of the device's answer was lost between relay replicas")

// errNATS: the call could not be sent.
var errNATS = errcode.New(errcode.Unavailable, "the relay cannot reach its other replicas (NATS)")

// errEnded mirrors the link ending during the call at the holder.
var errEnded = errors.New("the link to the device ended during the call")

// Call carries call to replica, which holds device's link (relay.Peers).
func (p *Peers) Call(ctx context.Context, replica, device string, call relay.Call, progress func([]byte)) ([]byte, error) {
	inbox := p.nc.NewRespInbox()
	sub, err := p.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, errNATS
	}
	defer sub.Unsubscribe()
	sub.SetPendingLimits(pendingMessages, pendingBytes)
	cancelSubject := p.nc.NewRespInbox()
	for _, m := range p.requestMessages(replica, inbox, cancelSubject, device, call, ctx, progress != nil) {
		if err := p.nc.PublishMsg(m); err != nil {
			return nil, errNATS
		}
	}
	var result []byte
	for seq := 1; ; seq++ {
		wait, cancel := context.WithTimeout(ctx, silentBeats*beatEvery)
		m, err := sub.NextMsgWithContext(wait)
		cancel()
		switch {
		case ctx.Err() != nil:
			p.nc.Publish(cancelSubject, nil)
			return nil, ctx.Err()
		case errors.Is(err, nats.ErrNoResponders):
			// The replica is gone (or not yet back on a NATS that
			// restarted); the call reached no device.
			return nil, relay.ErrReplicaGone
		case err != nil:
			return nil, errSilent
		case m.Header.Get(hSeq) != strconv.Itoa(seq):
			p.nc.Publish(cancelSubject, nil)
			return nil, errLost
		}
		switch m.Header.Get(hKind) {
		case kindProgress:
			if progress != nil {
				progress(m.Data)
			}
		case kindPart:
			result = append(result, m.Data...)
		case kindResult:
			return append(result, m.Data...), nil
		case kindRPCError:
			var e jsonrpc.Error
			if json.Unmarshal(m.Data, &e) != nil {
				return nil, errLost
			}
			return nil, &e
		case kindNoRoute:
			return nil, relay.ErrNoRoute
		case kindEnded:
			return nil, errEnded
		}
	}
}

// requestMessages are call's messages: the arguments cut to the server's
// payload bound, the headers on each.
func (p *Peers) requestMessages(replica, inbox, cancelSubject, device string, call relay.Call, ctx context.Context, progress bool) []*nats.Msg {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(relayCallBound)
	}
	var out []*nats.Msg
	for _, part := range cut(call.Arguments, p.partBytes()) {
		m := &nats.Msg{Subject: callSubject(replica), Reply: inbox, Data: part, Header: nats.Header{}}
		m.Header.Set(hMore, "1")
		out = append(out, m)
	}
	last := out[len(out)-1]
	last.Header.Del(hMore)
	last.Header.Set(hDevice, device)
	last.Header.Set(hTool, call.Tool)
	last.Header.Set(hGrant, call.Grant)
	last.Header.Set(hCancel, cancelSubject)
	last.Header.Set(hDeadline, strconv.FormatInt(deadline.UnixNano(), 10))
	if progress {
		last.Header.Set(hProgress, "1")
	}
	if call.Arguments == nil {
		last.Header.Set(hNoArgs, "1")
	}
	return out
}

// partBytes is the most body one message carries.
func (p *Peers) partBytes() int {
	return max(int(p.nc.MaxPayload())-partHeadroom, partHeadroom)
}

// cut splits b into parts of at most n bytes; nil and empty b are one
// empty part.
func cut(b []byte, n int) [][]byte {
	var parts [][]byte
	for len(b) > n {
		parts = append(parts, b[:n])
		b = b[n:]
	}
	return append(parts, b)
}

// Reachable reports whether the connection to the NATS server is up, for
// the panel's overview.
func (p *Peers) Reachable() bool { return p.nc.IsConnected() }
