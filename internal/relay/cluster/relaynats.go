// Package cluster joins relay replicas through NATS (docs/scaling.md): a
// call that reaches one replica for a device whose link another holds goes
// to that replica as NATS messages, and the device's progress and answer
// come back the same way, in order, as the device encoded them. It is the
// relay's Peers: it carries bytes and decodes none of the call.
//
// NATS is a network, not a trust boundary: every message is sealed with
// the cluster key, which only the shared database holds (seal.go), so
// whoever reaches the NATS server reads no argument, result or grant, and
// a message it forges, replays or alters is dropped and counted, never
// acted on. A message's NATS headers and reply subject are not read: all
// a message says is in its sealed head.
//
// Each replica subscribes to two subjects of its own: <prefix>.<id>.call
// and <prefix>.<id>.alive. A call is one or more numbered messages on the
// first (the last names the device, tool, grant, deadline and the
// subjects for its answers and its cancellation; the body is the client's
// arguments, cut at the server's payload bound), answered on its answer
// subject by numbered messages: progress, a beat while the call runs, then
// the result (cut likewise) or why there is none. A gap in the numbers,
// or silence past a few beats, fails the call with unavailable, never
// with a wrong answer.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/nats-io/nats.go"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay"
)

// SubjectPrefix starts every subject the replicas use.
const SubjectPrefix = "commandcore.replica"

const (
	// beatEvery is how often a replica serving a call says it still is;
	// silentBeats of them missed and the caller gives up.
	beatEvery   = 2 * time.Second
	silentBeats = 3
	// answerPendingMessages and answerPendingBytes bound what one call's
	// answer may queue in the caller before it is read: above what a
	// client reading its stream lets pile up, and above the largest
	// result with its progress.
	answerPendingMessages = 1 << 14
	answerPendingBytes    = 2 * limits.MaxFrameBytes
	// partHeadroom is left in each message for its sealed head.
	partHeadroom = 4 << 10
	// callIDBytes is the size of a call's random ID.
	callIDBytes = 16
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
	// A link probe's answers.
	kindAnswers = "answers"
	kindSilent  = "silent"
)

// Why a message is dropped: the closed set of the metric's label.
const (
	// DropForged: it does not open under the cluster key (forged,
	// altered, or moved to another subject).
	DropForged = "forged"
	// DropReplayed: a call, part, probe or answer already taken.
	DropReplayed = "replayed"
	// DropStale: its deadline passed, or lies further ahead than any
	// call may run.
	DropStale = "stale"
	// DropOverBound: taking it would pass a bound on what is buffered.
	DropOverBound = "over_bound"
)

// DropReasons are every reason a message is dropped, for the metrics.
var DropReasons = []string{DropForged, DropReplayed, DropStale, DropOverBound}

var _ relay.Peers = (*Peers)(nil)

// Peers reaches the other replicas over one NATS connection.
type Peers struct {
	nc   *nats.Conn
	seal *sealer

	mu   sync.Mutex
	subs []*nats.Subscription
	// parts are the requests still arriving, by call ID, and
	// pendingBytes what they hold in all.
	parts        map[string]*request
	pendingBytes int
	// taken are the calls and probes taken whole, by ID, until their
	// deadline: one coming again is a replay.
	taken map[string]int64
	// serving ends the calls this replica serves for others, on Close.
	serving context.Context
	stop    context.CancelFunc

	drops [4]atomic.Uint64 // by DropReasons' order
}

// New returns the peers over nc, sealing with the cluster key (the
// relay state's ClusterKey); Serve starts answering for this replica.
func New(nc *nats.Conn, clusterKey []byte) (*Peers, error) {
	s, err := newSealer(clusterKey)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Peers{nc: nc, seal: s, parts: map[string]*request{}, taken: map[string]int64{}, serving: ctx, stop: stop}, nil
}

func callSubject(replica string) string  { return SubjectPrefix + "." + replica + ".call" }
func aliveSubject(replica string) string { return SubjectPrefix + "." + replica + ".alive" }

// newID is a call's or probe's random ID.
func newID() string {
	var b [callIDBytes]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// drop counts a message dropped for reason.
func (p *Peers) drop(reason string) {
	for i, r := range DropReasons {
		if r == reason {
			p.drops[i].Add(1)
		}
	}
}

// Dropped are the messages dropped since start, by reason (DropReasons).
func (p *Peers) Dropped() map[string]uint64 {
	out := make(map[string]uint64, len(DropReasons))
	for i, r := range DropReasons {
		out[r] = p.drops[i].Load()
	}
	return out
}

// Serve answers the other replicas' calls and link probes for replica,
// through here, until Close.
func (p *Peers) Serve(replica string, here relay.Here) error {
	calls, err := p.nc.Subscribe(callSubject(replica), func(m *nats.Msg) { p.receive(here, m) })
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "cannot subscribe on NATS")
	}
	alive, err := p.nc.Subscribe(aliveSubject(replica), func(m *nats.Msg) { p.probed(here, m) })
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

// probed answers a link probe for this replica, off the subscription's
// goroutine (the probe waits for the link's heartbeat).
func (p *Peers) probed(here relay.Here, m *nats.Msg) {
	h, _, err := p.seal.open(m.Subject, m.Data)
	if err != nil {
		p.drop(DropForged)
		return
	}
	if !p.fresh(h) || !p.take(h.Call, h.Deadline) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(p.serving, beatEvery)
		defer cancel()
		verdict := kindSilent
		if here.LinkAnswersHere(ctx, h.Device) {
			verdict = kindAnswers
		}
		p.nc.Publish(h.Reply, p.seal.seal(h.Reply, &head{Call: h.Call, Kind: verdict}, nil))
	}()
}

// LinkAnswers asks replica whether its link to device answers. Only a
// sealed answer to this probe counts; anything else on its subject is
// dropped while the probe waits.
func (p *Peers) LinkAnswers(ctx context.Context, replica, device string) bool {
	id, inbox := newID(), p.nc.NewRespInbox()
	sub, err := p.nc.SubscribeSync(inbox)
	if err != nil {
		return false
	}
	defer sub.Unsubscribe()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(beatEvery)
	}
	subject := aliveSubject(replica)
	body := p.seal.seal(subject, &head{Call: id, Device: device, Reply: inbox, Deadline: deadline.UnixNano()}, nil)
	// The reply subject is for the server's no-responders status only.
	if p.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: inbox, Data: body}) != nil {
		return false
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return false
		}
		h, _, err := p.seal.open(inbox, m.Data)
		switch {
		case err != nil:
			p.drop(DropForged)
		case h.Call != id:
			p.drop(DropReplayed)
		default:
			return h.Kind == kindAnswers
		}
	}
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
	id, inbox, cancelSubject := newID(), p.nc.NewRespInbox(), p.nc.NewRespInbox()
	sub, err := p.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, errNATS
	}
	defer sub.Unsubscribe()
	sub.SetPendingLimits(answerPendingMessages, answerPendingBytes)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(relayCallBound)
	}
	req := &head{Call: id, Device: device, Tool: call.Tool, Grant: call.Grant, Deadline: deadline.UnixNano(),
		Reply: inbox, Cancel: cancelSubject, Progress: progress != nil, NoArgs: call.Arguments == nil}
	for _, m := range p.requestMessages(replica, req, call.Arguments) {
		if err := p.nc.PublishMsg(m); err != nil {
			return nil, errNATS
		}
	}
	cancel := func() { p.nc.Publish(cancelSubject, p.seal.seal(cancelSubject, &head{Call: id}, nil)) }
	var result []byte
	heard := time.Now()
	for seq := 1; ; {
		wait, stop := context.WithDeadline(ctx, heard.Add(silentBeats*beatEvery))
		m, err := sub.NextMsgWithContext(wait)
		stop()
		switch {
		case ctx.Err() != nil:
			cancel()
			return nil, ctx.Err()
		case errors.Is(err, nats.ErrNoResponders):
			// The replica is gone (or not yet back on a NATS that
			// restarted); the call reached no device.
			return nil, relay.ErrReplicaGone
		case err != nil:
			return nil, errSilent
		}
		h, data, err := p.seal.open(inbox, m.Data)
		switch {
		case err != nil:
			p.drop(DropForged)
			continue
		case h.Call != id || h.Seq < seq:
			p.drop(DropReplayed)
			continue
		case h.Seq > seq:
			cancel()
			return nil, errLost
		}
		seq++
		heard = time.Now()
		switch h.Kind {
		case kindProgress:
			if progress != nil {
				progress(data)
			}
		case kindPart, kindResult:
			if len(result)+len(data) > limits.MaxFrameBytes {
				// No device answers more than its link carries.
				p.drop(DropOverBound)
				cancel()
				return nil, errLost
			}
			result = append(result, data...)
			if h.Kind == kindResult {
				return result, nil
			}
		case kindRPCError:
			var e jsonrpc.Error
			if json.Unmarshal(data, &e) != nil {
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

// requestMessages are a call's sealed messages: the arguments cut to the
// server's payload bound, every part numbered and naming the call and its
// deadline, the last one all of req.
func (p *Peers) requestMessages(replica string, req *head, args []byte) []*nats.Msg {
	subject := callSubject(replica)
	parts := cut(args, p.partBytes())
	out := make([]*nats.Msg, len(parts))
	for i, part := range parts {
		h := &head{Call: req.Call, Part: i + 1, More: true, Deadline: req.Deadline}
		if i == len(parts)-1 {
			h = req
			h.Part = i + 1
		}
		out[i] = &nats.Msg{Subject: subject, Data: p.seal.seal(subject, h, part)}
	}
	// The first part carries the reply subject for the server's
	// no-responders status.
	out[0].Reply = req.Reply
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
