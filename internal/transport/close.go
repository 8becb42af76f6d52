package transport

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gorilla/websocket"
)

// End names why a link ended, in the words the
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

// closeGrace bounds the best-effort close frame at the end of a link.
const closeGrace = time.Second

// controlWait bounds a control frame (pong, close).
func (c *Conn) controlWait() time.Duration {
	return min(closeGrace, c.opt.SendTimeout)
}

func (c *Conn) ended() error {
	return fmt.Errorf("%w (%s)", ErrEnded, c.End())
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
		c.stopHeartbeats()
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
