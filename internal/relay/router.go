package relay

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/commandcore/commandcore/internal/errcode"
)

// Call is one tool call as the relay forwards it.
type Call struct {
	// Tool is a tool of the relay's table.
	Tool string
	// Arguments are the client's, as it wrote them (on the multi-device
	// endpoint without the device argument); nil when it sent none.
	Arguments json.RawMessage
	// Grant is the grant minted for this call.
	Grant string
}

// Router carries a forwarded call to the link that holds its device. The
// relay authorizes the call, mints its grant and shapes the answer; the
// router only moves bytes, which it neither decodes nor re-encodes. The
// default is this process's own links; relays run as several replicas
// would route to the one that holds the link (docs/scaling.md).
type Router interface {
	// Call sends call to the device and returns the JSON-RPC result the
	// device answered with, as it encoded it (a valid JSON object). When
	// progress is not nil, every progress notification the device sends
	// for the call reaches it as the params object the device encoded
	// (whose progressToken is the router's, not the client's), in order
	// and before Call returns. A call whose ctx ends is cancelled on the
	// device. Errors: ErrNoRoute when no link holds the device, a
	// *jsonrpc.Error the device answered with, another error when the link
	// ended during the call.
	Call(ctx context.Context, deviceID string, call Call, progress func(params []byte)) ([]byte, error)
}

// ErrNoRoute is a Router's answer for a device no link holds.
var ErrNoRoute = errors.New("no link holds the device")

// ErrReplicaGone is Peers' answer when the replica the state names as
// the link's holder cannot be reached (NATS has no responder for it): the
// call reached no device, and whether the device is linked is unknown.
var ErrReplicaGone = errcode.New(errcode.Unavailable, "the relay replica holding the device's link cannot be reached")

// clusterRouter routes through the link this process holds (wire.go),
// else through the replica the state names as the link's holder. The
// holder last read for a device is remembered: a replica that no longer
// holds the link answers ErrNoRoute before the call reaches any device
// (and one that is gone, ErrReplicaGone), so the state is read again and
// the call goes to the new holder; nothing runs twice.
type clusterRouter struct{ s *Server }

func (r clusterRouter) Call(ctx context.Context, deviceID string, call Call, progress func([]byte)) ([]byte, error) {
	res, err := r.s.callHere(ctx, deviceID, call, progress)
	if !errors.Is(err, ErrNoRoute) || r.s.peers == nil {
		return res, err
	}
	if holder, ok := r.s.holders.get(deviceID); ok {
		r.s.crossSent.Add(1)
		res, err := r.s.peers.Call(ctx, holder, deviceID, call, progress)
		if !errors.Is(err, ErrNoRoute) && !errors.Is(err, ErrReplicaGone) {
			return res, err
		}
		r.s.holders.forget(deviceID)
	}
	holder, err := r.s.store.LinkHolder(deviceID, r.s.Now())
	if err != nil {
		return nil, errState
	}
	if holder == "" || holder == r.s.replica.ID {
		return nil, ErrNoRoute
	}
	r.s.holders.put(deviceID, holder)
	r.s.crossSent.Add(1)
	return r.s.peers.Call(ctx, holder, deviceID, call, progress)
}

// maxHolders bounds the link holders remembered; past it they are read
// again, which costs a query a call and nothing else.
const maxHolders = 1 << 16

// holderCache is the holder last read for each device calls went to.
type holderCache struct {
	mu sync.Mutex
	m  map[string]string
}

func (c *holderCache) get(device string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.m[device]
	return h, ok
}

func (c *holderCache) put(device, holder string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxHolders {
		c.m = map[string]string{}
	}
	c.m[device] = holder
}

func (c *holderCache) forget(device string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, device)
}

// CallHere carries call over the link this process holds to the device,
// for a peer replica that received the call (ErrNoRoute without one).
func (s *Server) CallHere(ctx context.Context, deviceID string, call Call, progress func([]byte)) ([]byte, error) {
	s.crossServed.Add(1)
	return s.callHere(ctx, deviceID, call, progress)
}

// callHere is CallHere for this replica's own calls.
func (s *Server) callHere(ctx context.Context, deviceID string, call Call, progress func([]byte)) ([]byte, error) {
	if call.Tool == updateCall {
		return s.updateHere(ctx, deviceID)
	}
	l := s.connected(deviceID)
	if l == nil {
		return nil, ErrNoRoute
	}
	return l.call(ctx, call, progress)
}

// LinkAnswersHere reports whether the link this process holds to the
// device answers its heartbeat, for a newcomer at another replica; one
// that does not is closed, so the newcomer can take the device over.
func (s *Server) LinkAnswersHere(ctx context.Context, deviceID string) bool {
	s.mu.Lock()
	conn := s.held[deviceID]
	s.mu.Unlock()
	if conn == nil {
		return false
	}
	if conn.Alive(ctx) {
		return true
	}
	go conn.Close()
	return false
}

// router is the Router calls go through.
func (s *Server) router() Router {
	if s.Router != nil {
		return s.Router
	}
	return clusterRouter{s}
}
