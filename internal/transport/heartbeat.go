package transport

import (
	"context"
)

// maxPending bounds the server's unanswered heartbeat nonces; while
// that many are pending the server skips heartbeats.
const maxPending = 8

// answerHeartbeat is the agent end's answer to a server heartbeat: an
// ack with HMAC-SHA256(secret, nonce), which never reaches the MCP
// session. On the server end a heartbeat is not ours to answer; it still
// counts as life. It reports whether the link is still up.
func (c *Conn) answerHeartbeat(nonce string) bool {
	if c.role != roleAgent {
		return true
	}
	ack := heartbeatAckFrame(c.secret, nonce)
	// Never block the reader on the writer: if the heartbeat channel
	// is full the writer is stuck and the send timeout will end the
	// link; this ack is dropped.
	select {
	case c.ctrl <- ack:
	default:
	}
	return true
}

// checkHeartbeatAck is the server end's check of an agent's ack: an ack
// for a nonce it did not send, or with a wrong MAC, ends the link with
// EndAuth. It reports whether the link is still up.
func (c *Conn) checkHeartbeatAck(nonce, mac string) bool {
	if c.role != roleServer {
		return true
	}
	if !c.takePending(nonce) || !verifyMAC(c.secret, nonce, mac) {
		c.finish(EndAuth)
		return false
	}
	c.verified.Add(1)
	c.answered(nonce)
	return true
}

// beat sends one heartbeat with a fresh nonce. It skips the beat when
// maxPending heartbeats are still unanswered (a slow agent is never punished
// for it: silence decides whether the link is dead) or when the heartbeat
// channel is full (the writer is stuck and the send timeout decides).
func (c *Conn) beat() {
	nonce, frame, ok := newHeartbeat()
	if !ok || !c.addPending(nonce, nil) {
		return
	}
	select {
	case c.ctrl <- frame:
	default:
		c.takePending(nonce)
	}
}

// newHeartbeat draws a fresh nonce and encodes its heartbeat; false when
// there is no randomness (silence will decide).
func newHeartbeat() (nonce string, frame []byte, ok bool) {
	nonce, err := newNonce()
	if err != nil {
		return "", nil, false
	}
	return nonce, heartbeatFrame(nonce), true
}

// addPending records nonce as sent and unanswered, with answered (if not
// nil) to close once its ack verified; it refuses when maxPending nonces
// are already pending.
func (c *Conn) addPending(nonce string, answered chan struct{}) bool {
	c.pendMu.Lock()
	defer c.pendMu.Unlock()
	if len(c.pending) >= maxPending {
		return false
	}
	c.pending = append(c.pending, nonce)
	if answered != nil {
		if c.waiters == nil {
			c.waiters = map[string]chan struct{}{}
		}
		c.waiters[nonce] = answered
	}
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

// Alive sends a heartbeat at once and reports whether the agent answers it
// with a valid MAC before ctx ends. Server end only. A link with maxPending
// heartbeats unanswered is not alive.
func (c *Conn) Alive(ctx context.Context) bool {
	if c.role != roleServer {
		return false
	}
	nonce, frame, ok := newHeartbeat()
	if !ok {
		return false
	}
	answered := make(chan struct{})
	if !c.addPending(nonce, answered) {
		return false
	}
	defer func() {
		c.pendMu.Lock()
		delete(c.waiters, nonce)
		c.pendMu.Unlock()
	}()
	select {
	case c.ctrl <- frame:
	case <-c.done:
		return false
	case <-ctx.Done():
		c.takePending(nonce)
		return false
	}
	select {
	case <-answered:
		return true
	case <-c.done:
		return false
	case <-ctx.Done():
		return false
	}
}

// answered wakes the Alive waiting for nonce, if any, once its ack verified.
func (c *Conn) answered(nonce string) {
	c.pendMu.Lock()
	defer c.pendMu.Unlock()
	if ch := c.waiters[nonce]; ch != nil {
		close(ch)
		delete(c.waiters, nonce)
	}
}
