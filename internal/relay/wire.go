package relay

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/jsonspan"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/transport"
	"github.com/commandcore/commandcore/internal/version"
)

// A forwarded call travels over the device's link as bytes: the relay
// writes the tools/call request itself and the link's reader hands the
// response and the progress notifications of the call back (deviceLink.take)
// before anything decodes them. The link's MCP client session, which
// opened the link, still reads every other message.

// callIDPrefix starts the JSON-RPC id, and progress token, of every call
// the relay forwards on a link; the link's client session numbers its own
// requests, so the two never meet.
const callIDPrefix = "cc-"

var errLinkEnded = errors.New("the link to the device ended during the call")

// deviceLink is one connected device.
type deviceLink struct {
	conn    *transport.Conn
	session *mcp.ClientSession
	// meta is what every request on this link carries in _meta besides
	// the grant and the progress token: the protocol triple of the version
	// the session negotiated (empty before 2026-07-28), as JSON members.
	meta []byte
	// offer is the update this relay offers the link's agent, when
	// hasOffer; set before the link is published, never changed.
	offer    transport.Offer
	hasOffer bool

	next  atomic.Uint64
	mu    sync.Mutex
	calls map[string]*linkCall
}

// linkCall is one forwarded call waiting for its answer.
type linkCall struct {
	progress func([]byte)
	answer   chan linkAnswer // capacity 1
}

type linkAnswer struct {
	result []byte
	err    error
}

// newDeviceLink is the link once its session is open.
func newDeviceLink(conn *transport.Conn, session *mcp.ClientSession) *deviceLink {
	l := &deviceLink{conn: conn, session: session}
	if res := session.InitializeResult(); res != nil && res.ProtocolVersion >= statelessProtocol {
		l.meta = protocolMeta(res.ProtocolVersion)
	}
	conn.SetTap(l.take)
	return l
}

// protocolMetas holds protocolMeta's answers, one per version: every link
// of a version shares its bytes.
var protocolMetas sync.Map

// protocolMeta is the _meta triple of the stateless protocol revisions
// (SEP-2575): every request names its version, client and capabilities.
func protocolMeta(protocol string) []byte {
	if m, ok := protocolMetas.Load(protocol); ok {
		return m.([]byte)
	}
	info, _ := json.Marshal(mcp.Implementation{Name: "commandcore-relay", Version: version.Version})
	pv, _ := json.Marshal(protocol)
	m, _ := protocolMetas.LoadOrStore(protocol, []byte(`,"`+mcp.MetaKeyProtocolVersion+`":`+string(pv)+
		`,"io.modelcontextprotocol/clientInfo":`+string(info)+
		`,"io.modelcontextprotocol/clientCapabilities":{}`))
	return m.([]byte)
}

// call writes call's request on the link and waits for its answer.
func (l *deviceLink) call(ctx context.Context, call Call, progress func([]byte)) ([]byte, error) {
	id := callIDPrefix + strconv.FormatUint(l.next.Add(1), 36)
	frame, err := callFrame(id, call, l.meta, progress != nil)
	if err != nil {
		return nil, err
	}
	c := &linkCall{progress: progress, answer: make(chan linkAnswer, 1)}
	l.mu.Lock()
	if l.calls == nil {
		// Made with the link's first call: an idle link holds no map.
		l.calls = map[string]*linkCall{}
	}
	l.calls[id] = c
	l.mu.Unlock()
	defer l.forget(id)
	if err := l.conn.WriteFrame(ctx, frame); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, transport.ErrFrameTooLarge) {
			return nil, err
		}
		return nil, errLinkEnded
	}
	select {
	case a := <-c.answer:
		return a.result, a.err
	case <-l.conn.Done():
		return nil, errLinkEnded
	case <-ctx.Done():
		l.cancel(id)
		return nil, ctx.Err()
	}
}

func (l *deviceLink) forget(id string) {
	l.mu.Lock()
	delete(l.calls, id)
	l.mu.Unlock()
}

// cancel tells the device a call's client is gone, as the MCP client
// session would.
func (l *deviceLink) cancel(id string) {
	ctx, done := context.WithTimeout(context.Background(), limits.SendTimeout)
	defer done()
	l.conn.WriteFrame(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"`+id+`","reason":"the client cancelled the call"}}`))
}

// callFrame encodes a forwarded call's request.
func callFrame(id string, call Call, meta []byte, progress bool) ([]byte, error) {
	name, err := json.Marshal(call.Tool)
	if err != nil {
		return nil, err
	}
	grant, err := json.Marshal(call.Grant)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(call.Arguments)+len(grant)+len(meta)+160)
	b = append(b, `{"jsonrpc":"2.0","id":"`+id+`","method":"tools/call","params":{"name":`...)
	b = append(b, name...)
	if len(call.Arguments) > 0 {
		b = append(b, `,"arguments":`...)
		b = append(b, call.Arguments...)
	}
	b = append(b, `,"_meta":{"`+authz.GrantMetaKey+`":`...)
	b = append(b, grant...)
	if progress {
		b = append(b, `,"progressToken":"`+id+`"`...)
	}
	b = append(b, meta...)
	return append(b, "}}}"...), nil
}

// take is the link's tap: it takes the responses and progress
// notifications of the calls this link forwards, and declines every other
// frame. A frame it takes has been validated as JSON whole.
func (l *deviceLink) take(frame []byte) bool {
	ms, err := jsonspan.Object(frame)
	if err != nil {
		return false
	}
	if method := jsonspan.Find(ms, "method"); method != nil {
		if m, _ := jsonspan.String(method); m != "notifications/progress" || jsonspan.Find(ms, "id") != nil {
			return false
		}
		return l.takeProgress(jsonspan.Find(ms, "params"))
	}
	id, ok := jsonspan.String(jsonspan.Find(ms, "id"))
	if !ok || len(id) <= len(callIDPrefix) || id[:len(callIDPrefix)] != callIDPrefix {
		return false
	}
	l.mu.Lock()
	c := l.calls[id]
	delete(l.calls, id)
	l.mu.Unlock()
	if c == nil {
		// The answer to a call already given up on.
		return true
	}
	var a linkAnswer
	if raw := jsonspan.Find(ms, "error"); raw != nil {
		werr := &jsonrpc.Error{}
		if json.Unmarshal(raw, werr) != nil {
			werr = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the device's error could not be read"}
		}
		a.err = werr
	} else if raw := jsonspan.Find(ms, "result"); len(raw) > 0 && raw[0] == '{' {
		a.result = raw
	} else {
		a.err = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the device's answer has no result"}
	}
	c.answer <- a
	return true
}

// takeProgress hands one progress notification to its call, on the
// reader: the call's answer cannot overtake it, and a slow client slows
// the link (backpressure) instead of growing a queue.
func (l *deviceLink) takeProgress(params []byte) bool {
	ms, err := jsonspan.Object(params)
	if err != nil {
		return false
	}
	token, ok := jsonspan.String(jsonspan.Find(ms, "progressToken"))
	if !ok {
		return false
	}
	l.mu.Lock()
	c := l.calls[token]
	l.mu.Unlock()
	if c != nil && c.progress != nil {
		c.progress(params)
	}
	return c != nil || len(token) > len(callIDPrefix) && token[:len(callIDPrefix)] == callIDPrefix
}
