package transport

import "context"

// Alive sends a heartbeat at once and reports whether the agent answers it
// with a valid MAC before ctx ends. Server end only. A link with maxPending
// heartbeats unanswered is not alive.
func (c *Conn) Alive(ctx context.Context) bool {
	if c.role != roleServer {
		return false
	}
	nonce, err := newNonce()
	if err != nil {
		return false
	}
	frame, err := heartbeatFrame(nonce)
	if err != nil {
		return false
	}
	answered := make(chan struct{})
	c.pendMu.Lock()
	if len(c.pending) >= maxPending {
		c.pendMu.Unlock()
		return false
	}
	c.pending = append(c.pending, nonce)
	if c.waiters == nil {
		c.waiters = map[string]chan struct{}{}
	}
	c.waiters[nonce] = answered
	c.pendMu.Unlock()
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
