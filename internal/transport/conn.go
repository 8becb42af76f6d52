// Package transport is the WebSocket link between an agent and its server
// (SPEC §4). It carries MCP JSON-RPC, one JSON-RPC message per WebSocket
// text message, with a bounded outbound queue with backpressure, a send
// timeout, a silence timeout, authenticated heartbeats and the hand-over of
// rotated device tokens. A *Conn is both an mcp.Transport and an
// mcp.Connection, so the agent serves an mcp.Server over it and the relay
// runs an mcp.Client over it. On the agent's side, Run keeps the link up:
// it dials, reconnects with capped, jittered backoff and journals how each
// link ended.
//
// Nothing in this package logs, and no error it returns carries message
// content: only the kind of end (End) is ever reported.
package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/limits"
)

// End names why a link ended (SPEC §4 diagnostics), in the words the
// agent's journal records (activity.Reason) and the relay's metrics label
// its link ends with. Content-free.
type End string

// The kinds of end. A Conn ends with one of the first six; the last two
// only ever end one of Run's dials.
const (
	EndRemoteClose   End = "remote_close"
	EndSendTimeout   End = "send_timeout"
	EndSilence       End = "silence_timeout"
	EndProtocol      End = "protocol_error"
	EndAuth          End = "authentication_failure"
	EndLocalShutdown End = "local_shutdown"
	// EndNetworkError: a dial failed underneath the WebSocket (reset,
	// unreachable, a server in trouble).
	EndNetworkError End = "network_error"
	// EndDeviceBusy: the server refused the dial because another link
	// with this device's credentials still answers (device_busy).
	EndDeviceBusy End = "device_busy"
)

// ErrEnded is wrapped by the error Write returns once the link has ended. Read instead returns an error wrapping io.EOF so
// an MCP session ends cleanly.
var ErrEnded = errors.New("link: the link has ended")

// ErrFrameTooLarge is returned by Write for a request or notification whose
// encoding exceeds MaxFrameBytes; the peer would refuse it. The link itself
// stays up.
var ErrFrameTooLarge = errors.New("link: message exceeds the frame bound")

// CodeResultTooLarge is the JSON-RPC error code of the response Write sends
// in place of a result too large for one frame (a server-defined code).
const CodeResultTooLarge = -32010

// resultTooLarge is the error a too-large result becomes: the caller gets
// an answer naming the problem, and the link, which a failed write would
// end, stays up.
var resultTooLarge = &jsonrpc.Error{Code: CodeResultTooLarge, Message: "the result is larger than one link frame"}

// Options tune a link; zero values mean the limits package's bounds.
type Options struct {
	// QueueFrames is the capacity of the outbound MCP queue.
	QueueFrames int
	// SendTimeout bounds one WebSocket send.
	SendTimeout time.Duration
	// SilenceTimeout is how long the link may go without any inbound frame.
	SilenceTimeout time.Duration
	// HeartbeatInterval is how often the server end sends a heartbeat. A
	// negative value disables heartbeats (tests only). The agent end ignores it.
	HeartbeatInterval time.Duration
	// MaxFrameBytes bounds one inbound (and outbound) WebSocket message.
	MaxFrameBytes int64
	// Rotate, on the agent end, stores the next device token the server
	// hands over; the token is acknowledged only once Rotate returned nil.
	// It runs on the link's reader. Nil: rotations are not acknowledged,
	// and the server keeps the current token. The server end ignores it.
	Rotate func(token string) error
}

func (o Options) withDefaults() Options {
	if o.QueueFrames <= 0 {
		o.QueueFrames = limits.LiveQueueFrames
	}
	if o.SendTimeout <= 0 {
		o.SendTimeout = limits.SendTimeout
	}
	if o.SilenceTimeout <= 0 {
		o.SilenceTimeout = limits.SilenceTimeout
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = limits.HeartbeatInterval
	}
	if o.MaxFrameBytes <= 0 {
		o.MaxFrameBytes = limits.MaxFrameBytes
	}
	return o
}

const (
	// ctrlFrames is the capacity of the heartbeat channel. Heartbeat frames
	// (and acks) bypass the MCP queue so a queue kept full by a busy producer
	// never starves them; the writer drains this channel first.
	ctrlFrames = 4
	// maxPending bounds the server's unanswered heartbeat nonces; while
	// that many are pending the server skips heartbeats.
	maxPending = 8
	// closeGrace bounds the best-effort close frame at the end of a link.
	closeGrace = time.Second
)

var (
	_ mcp.Transport  = (*Conn)(nil)
	_ mcp.Connection = (*Conn)(nil)
)

type role int

const (
	roleAgent role = iota + 1
	roleServer
)

// Conn is one end of a link over ws. It implements mcp.Transport (Connect
// returns itself as the mcp.Connection; a second Connect is an error) and
// mcp.Connection.
//
// Outbound, Write puts each encoded message on a queue of QueueFrames
// frames and blocks while it is full (backpressure); one writer goroutine
// sends frames with a SendTimeout deadline. Heartbeat frames travel on a
// small separate channel that the writer serves first. Inbound, one reader
// goroutine reads with a SilenceTimeout deadline that every frame (and every
// WebSocket ping or pong) renews, and hands MCP messages to Read one at a
// time; heartbeats and rotations never reach Read.
type Conn struct {
	ws     *websocket.Conn
	opt    Options
	role   role
	secret []byte

	out  chan []byte          // MCP frames, capacity QueueFrames
	ctrl chan []byte          // heartbeat frames, capacity ctrlFrames
	in   chan jsonrpc.Message // MCP messages for Read, unbuffered

	done    chan struct{}
	endOnce sync.Once
	endMu   sync.Mutex
	end     End
	wg      sync.WaitGroup

	connected atomic.Bool

	pendMu  sync.Mutex
	pending []string                 // server: unanswered nonces
	waiters map[string]chan struct{} // server: Alive calls by nonce

	rotMu    sync.Mutex
	rotToken string        // server: the token a rotation under way hands over
	rotDone  chan struct{} // closed when the agent acknowledges it

	verified atomic.Int64 // server: heartbeat acks verified (for tests)
}

// Agent wraps the device's end: it answers heartbeats with
// HMAC-SHA256(secret, nonce) and never forwards them to the MCP session.
func Agent(ws *websocket.Conn, secret []byte, opt Options) *Conn {
	return start(ws, secret, opt, roleAgent)
}

// Server wraps the relay's end: it sends a heartbeat every HeartbeatInterval
// with a fresh 16-byte random nonce, verifies each ack's MAC in constant time
// (a wrong MAC, or an ack for an unknown nonce, ends the link with EndAuth);
// acks are never forwarded to the MCP session.
func Server(ws *websocket.Conn, secret []byte, opt Options) *Conn {
	return start(ws, secret, opt, roleServer)
}

func start(ws *websocket.Conn, secret []byte, opt Options, r role) *Conn {
	opt = opt.withDefaults()
	c := &Conn{
		ws:     ws,
		opt:    opt,
		role:   r,
		secret: append([]byte(nil), secret...),
		out:    make(chan []byte, opt.QueueFrames),
		ctrl:   make(chan []byte, ctrlFrames),
		in:     make(chan jsonrpc.Message),
		done:   make(chan struct{}),
	}
	ws.SetReadLimit(opt.MaxFrameBytes)
	ws.SetPongHandler(func(string) error {
		c.renew()
		return nil
	})
	ws.SetPingHandler(func(data string) error {
		c.renew()
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(c.controlWait()))
		var ne net.Error
		if err == nil || errors.Is(err, websocket.ErrCloseSent) || (errors.As(err, &ne) && ne.Timeout()) {
			return nil
		}
		return err
	})
	// gorilla's default close handler echoes a peer's close frame; the reader
	// then sees the *websocket.CloseError and records EndRemoteClose.
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	if r == roleServer && opt.HeartbeatInterval > 0 {
		c.wg.Add(1)
		go c.heartbeatLoop()
	}
	return c
}

// controlWait bounds a control frame (pong, close).
func (c *Conn) controlWait() time.Duration {
	return min(closeGrace, c.opt.SendTimeout)
}

// renew pushes the silence deadline out; it runs on the reader goroutine
// (gorilla calls the ping and pong handlers from inside ReadMessage).
func (c *Conn) renew() {
	select {
	case <-c.done:
		return // draining: the closing grace stands
	default:
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(c.opt.SilenceTimeout))
}

// Connect implements mcp.Transport: it returns c itself, once.
func (c *Conn) Connect(context.Context) (mcp.Connection, error) {
	if !c.connected.CompareAndSwap(false, true) {
		return nil, errors.New("link: transport already connected")
	}
	return c, nil
}

// Read returns the next MCP message from the peer. After the link has ended
// it returns an error wrapping io.EOF.
func (c *Conn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-c.done:
		return nil, c.eof()
	default:
	}
	select {
	case msg := <-c.in:
		return msg, nil
	case <-c.done:
		return nil, c.eof()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *Conn) eof() error {
	return fmt.Errorf("link ended (%s): %w", c.End(), io.EOF)
}

func (c *Conn) ended() error {
	return fmt.Errorf("%w (%s)", ErrEnded, c.End())
}

// Write queues msg for the peer. While the queue is full it blocks until
// there is room, ctx is done (returning ctx.Err()) or the link ends
// (returning an error wrapping ErrEnded).
func (c *Conn) Write(ctx context.Context, msg jsonrpc.Message) error {
	select {
	case <-c.done:
		return c.ended()
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	frame, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return errors.New("link: cannot encode message")
	}
	if int64(len(frame)) > c.opt.MaxFrameBytes {
		resp, ok := msg.(*jsonrpc.Response)
		if !ok {
			return ErrFrameTooLarge
		}
		if frame, err = jsonrpc.EncodeMessage(&jsonrpc.Response{ID: resp.ID, Error: resultTooLarge}); err != nil {
			return errors.New("link: cannot encode message")
		}
	}
	select {
	case c.out <- frame:
		return nil
	case <-c.done:
		return c.ended()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close ends the link (EndLocalShutdown if nothing ended it before), sends a
// normal WebSocket close frame, closes the socket and waits for the link's
// goroutines to exit. Frames still queued are dropped. Close may be called
// more than once and concurrently with Read and Write.
func (c *Conn) Close() error {
	c.finish(EndLocalShutdown)
	c.wg.Wait()
	return nil
}

// SessionID implements mcp.Connection; a link has no session id.
func (c *Conn) SessionID() string { return "" }

// Done is closed when the link has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// End is the first reason the link ended ("" while alive).
func (c *Conn) End() End {
	c.endMu.Lock()
	defer c.endMu.Unlock()
	return c.end
}

// finish records the first end, closes Done, sends a best-effort close frame
// and closes the socket, which unblocks the reader and the writer. Later
// calls wait for the first to complete and change nothing.
func (c *Conn) finish(e End) {
	c.endOnce.Do(func() {
		c.endMu.Lock()
		c.end = e
		c.endMu.Unlock()
		close(c.done)
		code := websocket.CloseGoingAway
		switch e {
		case EndLocalShutdown:
			code = websocket.CloseNormalClosure
		case EndProtocol:
			code = websocket.CloseProtocolError
		case EndAuth:
			code = websocket.ClosePolicyViolation
		}
		if e != EndSendTimeout && e != EndRemoteClose {
			err := c.ws.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(code, ""), time.Now().Add(c.controlWait()))
			if err == nil {
				// The closing handshake: the reader drains until the peer
				// answers our close (or the grace runs out) and then closes
				// the socket, so the peer reads our close code rather than
				// a reset from writing into a socket we had already shut.
				_ = c.ws.SetReadDeadline(time.Now().Add(c.controlWait()))
				return
			}
		}
		_ = c.ws.Close()
	})
}

// readEnd maps a read error to the kind of end.
func readEnd(err error) End {
	var ce *websocket.CloseError
	var ne net.Error
	switch {
	case errors.As(err, &ce):
		// The peer's close code says why it ended the link: a refused
		// heartbeat MAC (policy violation) is an authentication failure
		// on this end too, a frame it could not take a protocol error.
		switch ce.Code {
		case websocket.ClosePolicyViolation:
			return EndAuth
		case websocket.CloseProtocolError, websocket.CloseUnsupportedData, websocket.CloseMessageTooBig:
			return EndProtocol
		}
		return EndRemoteClose
	case errors.Is(err, websocket.ErrReadLimit):
		return EndProtocol
	case errors.As(err, &ne) && ne.Timeout():
		return EndSilence
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return EndRemoteClose
	case errors.As(err, &ne):
		return EndRemoteClose // reset and other transport failures
	default:
		return EndProtocol // gorilla's framing errors
	}
}

// writeEnd maps a write error to the kind of end.
func writeEnd(err error) End {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return EndSendTimeout
	}
	return EndRemoteClose
}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	c.readFrames()
	c.drain()
}

// drain reads and discards what the peer still sends once the link has
// ended, until its close frame, an error or the closing grace, then closes
// the socket. finish bounds it with a read deadline.
func (c *Conn) drain() {
	for {
		if _, _, err := c.ws.ReadMessage(); err != nil {
			break
		}
	}
	_ = c.ws.Close()
}

// readFrames reads and dispatches frames until the link ends.
func (c *Conn) readFrames() {
	for {
		c.renew()
		typ, data, err := c.ws.ReadMessage()
		if err != nil {
			c.finish(readEnd(err))
			return
		}
		f, bad := classify(typ, data)
		if bad != "" {
			c.finish(bad)
			return
		}
		switch f.kind {
		case frameMessage:
			select {
			case c.in <- f.msg:
			case <-c.done:
				return
			}
		case frameHeartbeat:
			if c.role != roleAgent {
				continue // not ours to answer; still counts as life
			}
			ack, err := heartbeatAckFrame(c.secret, f.nonce)
			if err != nil {
				c.finish(EndProtocol)
				return
			}
			// Never block the reader on the writer: if the heartbeat channel
			// is full the writer is stuck and the send timeout will end the
			// link; this ack is dropped.
			select {
			case c.ctrl <- ack:
			default:
			}
		case frameHeartbeatAck:
			if c.role != roleServer {
				continue
			}
			if !c.takePending(f.nonce) || !verifyMAC(c.secret, f.nonce, f.mac) {
				c.finish(EndAuth)
				return
			}
			c.verified.Add(1)
			c.answered(f.nonce)
		case frameRotate:
			if c.role == roleAgent {
				c.storeRotated(f.token)
			}
		case frameRotateAck:
			if c.role != roleServer {
				continue
			}
			if !c.rotationAcked(f.mac) {
				c.finish(EndAuth)
				return
			}
		}
	}
}

func (c *Conn) writeLoop() {
	defer c.wg.Done()
	for {
		var frame []byte
		select {
		case <-c.done:
			return
		case frame = <-c.ctrl:
		default:
			select {
			case <-c.done:
				return
			case frame = <-c.ctrl:
			case frame = <-c.out:
			}
		}
		_ = c.ws.SetWriteDeadline(time.Now().Add(c.opt.SendTimeout))
		if err := c.ws.WriteMessage(websocket.TextMessage, frame); err != nil {
			c.finish(writeEnd(err))
			return
		}
	}
}

func (c *Conn) heartbeatLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.opt.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		c.beat()
	}
}

// beat sends one heartbeat with a fresh nonce. It skips the beat when
// maxPending heartbeats are still unanswered (a slow agent is never punished
// for it: silence decides whether the link is dead) or when the heartbeat
// channel is full (the writer is stuck and the send timeout decides).
func (c *Conn) beat() {
	nonce, err := newNonce()
	if err != nil {
		return // no randomness this tick; silence will decide
	}
	frame, err := heartbeatFrame(nonce)
	if err != nil {
		return
	}
	if !c.addPending(nonce) {
		return
	}
	select {
	case c.ctrl <- frame:
	default:
		c.takePending(nonce)
	}
}

// addPending records nonce as sent and unanswered; it refuses when
// maxPending nonces are already pending.
func (c *Conn) addPending(nonce string) bool {
	c.pendMu.Lock()
	defer c.pendMu.Unlock()
	if len(c.pending) >= maxPending {
		return false
	}
	c.pending = append(c.pending, nonce)
	return true
}

// takePending removes nonce from the pending set and reports whether it was there.
func (c *Conn) takePending(nonce string) bool {
	c.pendMu.Lock()
	defer c.pendMu.Unlock()
	for i, n := range c.pending {
		if n == nonce {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			return true
		}
	}
	return false
}
