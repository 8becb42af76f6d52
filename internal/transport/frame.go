package transport

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"

	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The heartbeat methods. They are JSON-RPC notifications that live only on
// the link: neither end ever hands them to its MCP session.
const (
	// MethodHeartbeat is sent by the server with a fresh nonce.
	MethodHeartbeat = "notifications/commandcore/heartbeat"
	// MethodHeartbeatAck is the agent's authenticated answer.
	MethodHeartbeatAck = "notifications/commandcore/heartbeat_ack"
)

const (
	// nonceBytes is the size of the nonce the server draws per heartbeat.
	nonceBytes = 16
	// maxNonceBytes bounds the decoded nonce the agent agrees to MAC.
	maxNonceBytes = 64
)

// nonceEncoding is base64url without padding, for nonces and MACs alike.
var nonceEncoding = base64.RawURLEncoding

// MAC returns base64url(HMAC-SHA256(secret, nonce bytes)), where nonce is the
// base64url (unpadded) text of the heartbeat's nonce. It returns "" when the
// nonce is not valid base64url, which never matches a real MAC.
func MAC(secret []byte, nonce string) string {
	raw, err := nonceEncoding.DecodeString(nonce)
	if err != nil {
		return ""
	}
	return nonceEncoding.EncodeToString(macBytes(secret, raw))
}

func macBytes(secret, nonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(nonce)
	return m.Sum(nil)
}

// verifyMAC reports, in constant time with respect to the MAC's contents,
// whether mac is the right answer to nonce under secret.
func verifyMAC(secret []byte, nonce, mac string) bool {
	rawNonce, err := nonceEncoding.DecodeString(nonce)
	if err != nil {
		return false
	}
	got, err := nonceEncoding.DecodeString(mac)
	if err != nil {
		return false
	}
	return hmac.Equal(got, macBytes(secret, rawNonce))
}

// newNonce draws a fresh random nonce.
func newNonce() (string, error) {
	b := make([]byte, nonceBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return nonceEncoding.EncodeToString(b), nil
}

type heartbeatParams struct {
	Nonce string `json:"nonce"`
}

type heartbeatAckParams struct {
	Nonce string `json:"nonce"`
	MAC   string `json:"mac"`
}

type notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

func heartbeatFrame(nonce string) ([]byte, error) {
	return json.Marshal(notification{JSONRPC: "2.0", Method: MethodHeartbeat, Params: heartbeatParams{Nonce: nonce}})
}

func heartbeatAckFrame(secret []byte, nonce string) ([]byte, error) {
	return json.Marshal(notification{JSONRPC: "2.0", Method: MethodHeartbeatAck,
		Params: heartbeatAckParams{Nonce: nonce, MAC: MAC(secret, nonce)}})
}

// frameKind is what one inbound WebSocket message turned out to be.
type frameKind int

const (
	frameMessage      frameKind = iota + 1 // an MCP message for the session
	frameHeartbeat                         // a server heartbeat (nonce set)
	frameHeartbeatAck                      // an agent's ack (nonce and mac set)
	frameRotate                            // a server's rotation (token set)
	frameRotateAck                         // an agent's rotation ack (mac set)
)

// inbound is one classified WebSocket message.
type inbound struct {
	kind  frameKind
	msg   jsonrpc.Message // frameMessage only
	nonce string          // heartbeat and ack
	mac   string          // heartbeat ack and rotation ack
	token string          // rotation only
}

// classify decodes one inbound WebSocket message. It is pure: no socket, no
// state, no secret. On failure it returns EndProtocol and a zero inbound; it
// never echoes the content anywhere. The frame-size bound is enforced by the
// socket's read limit before classify runs.
//
// The link's own methods (heartbeats, rotations) must be notifications with
// well-formed params (unknown fields are ignored: the fields are additive).
// MACs are checked by the server end, which alone knows which nonces and
// tokens it sent.
func classify(messageType int, data []byte) (inbound, End) {
	if messageType != websocket.TextMessage {
		return inbound{}, EndProtocol
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return inbound{}, EndProtocol
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !linkMethod(req.Method) {
		return inbound{kind: frameMessage, msg: msg}, ""
	}
	if req.ID.IsValid() {
		return inbound{}, EndProtocol
	}
	switch req.Method {
	case MethodHeartbeat:
		var p heartbeatParams
		if json.Unmarshal(req.Params, &p) != nil || !validNonce(p.Nonce) {
			return inbound{}, EndProtocol
		}
		return inbound{kind: frameHeartbeat, nonce: p.Nonce}, ""
	case MethodRotate:
		token, ok := decodeRotate(req.Params)
		if !ok {
			return inbound{}, EndProtocol
		}
		return inbound{kind: frameRotate, token: token}, ""
	case MethodRotateAck:
		mac, ok := decodeRotateAck(req.Params)
		if !ok {
			return inbound{}, EndProtocol
		}
		return inbound{kind: frameRotateAck, mac: mac}, ""
	default: // MethodHeartbeatAck
		var p heartbeatAckParams
		if json.Unmarshal(req.Params, &p) != nil || !validNonce(p.Nonce) || p.MAC == "" {
			return inbound{}, EndProtocol
		}
		return inbound{kind: frameHeartbeatAck, nonce: p.Nonce, mac: p.MAC}, ""
	}
}

// linkMethod reports whether method is one the link keeps to itself.
func linkMethod(method string) bool {
	switch method {
	case MethodHeartbeat, MethodHeartbeatAck, MethodRotate, MethodRotateAck:
		return true
	}
	return false
}

func validNonce(n string) bool {
	if n == "" || len(n) > nonceEncoding.EncodedLen(maxNonceBytes) {
		return false
	}
	_, err := nonceEncoding.DecodeString(n)
	return err == nil
}
