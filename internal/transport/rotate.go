package transport

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
)

// The rotation methods (README). Like the
// heartbeats they are notifications that live only on the link. The server
// hands the agent its next device token over the link, which only the
// holder of the current token could open; the agent answers once it has
// stored the token, with a MAC over it under the device secret. What the
// ends do with the token is theirs to decide: see internal/relay's rotate.go.
const (
	// MethodRotate carries the next device token, server to agent.
	MethodRotate = "notifications/commandcore/rotate"
	// MethodRotateAck is the agent's answer once it stored the token.
	MethodRotateAck = "notifications/commandcore/rotate_ack"
)

// maxTokenBytes bounds a device token a rotation hands over.
const maxTokenBytes = 256

// rotateMACContext keeps a rotation's MAC apart from every heartbeat MAC.
const rotateMACContext = "commandcore rotate\x00"

type rotateParams struct {
	Token string `json:"token"`
}

type rotateAckParams struct {
	MAC string `json:"mac"`
}

// rotateMAC is base64url(HMAC-SHA256(secret, context || token)).
func rotateMAC(secret []byte, token string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(rotateMACContext))
	m.Write([]byte(token))
	return nonceEncoding.EncodeToString(m.Sum(nil))
}

// verifyRotateMAC reports, in constant time with respect to the MAC's
// contents, whether mac acknowledges token under secret.
func verifyRotateMAC(secret []byte, token, mac string) bool {
	got, err := nonceEncoding.DecodeString(mac)
	if err != nil {
		return false
	}
	want, _ := nonceEncoding.DecodeString(rotateMAC(secret, token))
	return hmac.Equal(got, want)
}

func rotateFrame(token string) ([]byte, error) {
	return json.Marshal(notification{JSONRPC: "2.0", Method: MethodRotate, Params: rotateParams{Token: token}})
}

func rotateAckFrame(secret []byte, token string) ([]byte, error) {
	return json.Marshal(notification{JSONRPC: "2.0", Method: MethodRotateAck,
		Params: rotateAckParams{MAC: rotateMAC(secret, token)}})
}

// ValidToken reports whether token can be a device token on the wire: 1
// to 256 bytes of printable ASCII without spaces, so it fits a bearer
// header and an identity file as is.
func ValidToken(token string) bool {
	if token == "" || len(token) > maxTokenBytes {
		return false
	}
	for i := 0; i < len(token); i++ {
		if token[i] <= ' ' || token[i] > '~' {
			return false
		}
	}
	return true
}

// decodeRotate reads a rotation's params: the token, or false when they
// are malformed. Unknown fields are ignored (the fields are additive).
func decodeRotate(params json.RawMessage) (string, bool) {
	var p rotateParams
	if json.Unmarshal(params, &p) != nil || !ValidToken(p.Token) {
		return "", false
	}
	return p.Token, true
}

// decodeRotateAck reads a rotation ack's params: the MAC, or false when
// they are malformed.
func decodeRotateAck(params json.RawMessage) (string, bool) {
	var p rotateAckParams
	if json.Unmarshal(params, &p) != nil || !validNonce(p.MAC) {
		return "", false
	}
	return p.MAC, true
}

// Rotate hands the agent token as its next device token and waits until
// the agent acknowledges that it stored it (a MAC over the token under the
// device secret), ctx ends, or the link ends. Server end only; one
// rotation at a time. An acknowledgment that arrives after Rotate gave up
// is still accepted; one that does not match ends the link (EndAuth).
func (c *Conn) Rotate(ctx context.Context, token string) error {
	if c.role != roleServer {
		return errors.New("link: only the server end hands out tokens")
	}
	if !ValidToken(token) {
		return errors.New("link: malformed device token")
	}
	frame, err := rotateFrame(token)
	if err != nil {
		return errors.New("link: cannot encode the rotation")
	}
	done := make(chan struct{})
	c.rotMu.Lock()
	if c.rotToken != "" {
		c.rotMu.Unlock()
		return errors.New("link: a rotation is under way")
	}
	c.rotToken, c.rotDone = token, done
	c.rotMu.Unlock()
	select {
	case c.ctrl <- frame:
	case <-c.done:
		return c.ended()
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-c.done:
		return c.ended()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkRotateAck is the server end's check of an agent's rotation ack:
// one that settles no rotation under way ends the link with EndAuth. It
// reports whether the link is still up.
func (c *Conn) checkRotateAck(mac string) bool {
	if c.role != roleServer {
		return true
	}
	if !c.rotationAcked(mac) {
		c.finish(EndAuth)
		return false
	}
	return true
}

// rotationAcked settles the rotation under way if mac acknowledges its
// token; false when there is none or mac does not match.
func (c *Conn) rotationAcked(mac string) bool {
	c.rotMu.Lock()
	defer c.rotMu.Unlock()
	if c.rotToken == "" || !verifyRotateMAC(c.secret, c.rotToken, mac) {
		return false
	}
	close(c.rotDone)
	c.rotToken, c.rotDone = "", nil
	return true
}

// storeRotated is the agent end's handling of a rotation: it acknowledges
// the token once Options.Rotate stored it. Without Options.Rotate, or when
// storing fails, the token is not acknowledged and the server keeps the
// current one. The server end ignores rotations.
func (c *Conn) storeRotated(token string) {
	if c.role != roleAgent || c.opt.Rotate == nil || c.opt.Rotate(token) != nil {
		return
	}
	ack, err := rotateAckFrame(c.secret, token)
	if err != nil {
		return
	}
	// As with heartbeat acks, never block the reader on a stuck writer; a
	// lost ack is one of the crash windows the scheme survives.
	select {
	case c.ctrl <- ack:
	default:
	}
}
