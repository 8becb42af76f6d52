// Package transport is the WebSocket link between an agent and its server
// (README). It carries MCP JSON-RPC, one JSON-RPC message per WebSocket
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
	// Offer, on the agent end, is told of each update offer the server
	// makes. It runs on the link's reader and must not block. The server
	// end ignores it.
	Offer func(Offer)
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

	beats    *wheel // server: the wheel that beats this link (wheel.go)
	beatSlot int

	pendMu  sync.Mutex
	pending []string                 // server: unanswered nonces
	waiters map[string]chan struct{} // server: Alive calls by nonce

	rotMu    sync.Mutex
	rotToken string        // server: the token a rotation under way hands over
	rotDone  chan struct{} // closed when the agent acknowledges it

	verified atomic.Int64 // server: heartbeat acks verified (for tests)

	tap atomic.Pointer[func([]byte) bool] // SetTap
}

// SetTap has the reader offer every inbound text frame to tap, before it
// decodes it; a frame tap takes (returns true for) goes no further. tap
// runs on the reader, so a slow tap slows the link (backpressure), and it
// must not keep the frame after it returns unless it owns it: each frame
// is a fresh slice. The relay takes its forwarded calls' responses and
// progress this way; heartbeats and everything else it declines go on as
// before.
func (c *Conn) SetTap(tap func(frame []byte) bool) { c.tap.Store(&tap) }

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
	c.startHeartbeats() // before an end can take it off its wheel
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	return c
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

// deliver hands msg to Read; false once the link has ended.
func (c *Conn) deliver(msg jsonrpc.Message) bool {
	select {
	case c.in <- msg:
		return true
	case <-c.done:
		return false
	}
}

func (c *Conn) eof() error {
	return fmt.Errorf("link ended (%s): %w", c.End(), io.EOF)
}

// SessionID implements mcp.Connection; a link has no session id.
func (c *Conn) SessionID() string { return "" }

// Done is closed when the link has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

func (c *Conn) readLoop() {
	defer c.wg.Done()
	c.readFrames()
	c.drain()
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
		if tap := c.tap.Load(); tap != nil && typ == websocket.TextMessage && (*tap)(data) {
			continue
		}
		f, bad := classify(typ, data)
		if bad != "" {
			c.finish(bad)
			return
		}
		// The link's own frames are handled where their mechanism lives
		// (heartbeat.go, rotate.go); each handler reports whether the link
		// is still up.
		up := true
		switch f.kind {
		case frameMessage:
			up = c.deliver(f.msg)
		case frameHeartbeat:
			up = c.answerHeartbeat(f.nonce)
		case frameHeartbeatAck:
			up = c.checkHeartbeatAck(f.nonce, f.mac)
		case frameRotate:
			c.storeRotated(f.token)
		case frameRotateAck:
			up = c.checkRotateAck(f.mac)
		case frameOffer:
			c.takeOffer(f.offer)
		}
		if !up {
			return
		}
	}
}
