package transport

import (
	"context"
	"errors"
	"time"

	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/commandcore/commandcore/internal/mcpwire"
)

// ctrlFrames is the capacity of the heartbeat channel. Heartbeat frames
// (and acks) bypass the MCP queue so a queue kept full by a busy producer
// never starves them; the writer drains this channel first.
const ctrlFrames = 4

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

// Write queues msg for the peer. While the queue is full it blocks until
// there is room, ctx is done (returning ctx.Err()) or the link ends
// (returning an error wrapping ErrEnded).
func (c *Conn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := c.writable(ctx); err != nil {
		return err
	}
	frame, err := mcpwire.Encode(msg)
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
	return c.enqueue(ctx, frame)
}

// WriteFrame queues one request or notification the caller encoded itself
// (it must be one valid JSON-RPC message), as Write does: a frame over
// MaxFrameBytes is ErrFrameTooLarge. The relay forwards calls this way,
// without decoding and re-encoding what it passes on.
func (c *Conn) WriteFrame(ctx context.Context, frame []byte) error {
	if err := c.writable(ctx); err != nil {
		return err
	}
	if int64(len(frame)) > c.opt.MaxFrameBytes {
		return ErrFrameTooLarge
	}
	return c.enqueue(ctx, frame)
}

// writable is nil while the link is up and ctx not done.
func (c *Conn) writable(ctx context.Context) error {
	select {
	case <-c.done:
		return c.ended()
	default:
	}
	return ctx.Err()
}

func (c *Conn) enqueue(ctx context.Context, frame []byte) error {
	select {
	case c.out <- frame:
		return nil
	case <-c.done:
		return c.ended()
	case <-ctx.Done():
		return ctx.Err()
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
