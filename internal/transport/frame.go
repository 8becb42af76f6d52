package transport

import (
	"bytes"
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

// A heartbeat and its ack as both ends write them: what encoding/json
// makes of a notification with heartbeatParams or heartbeatAckParams
// (frame_test.go pins it), written here without reflection. A nonce and a
// MAC are base64url (validNonce), which a JSON string holds as is. These
// are the frames of an idle link, so classify reads them in this form
// without the general JSON-RPC decoder (readLinkFrame).
const (
	heartbeatPrefix    = `{"jsonrpc":"2.0","method":"` + MethodHeartbeat + `","params":{"nonce":"`
	heartbeatSuffix    = `"}}`
	heartbeatAckPrefix = `{"jsonrpc":"2.0","method":"` + MethodHeartbeatAck + `","params":{"nonce":"`
	heartbeatAckMiddle = `","mac":"`
	heartbeatAckSuffix = `"}}`
)

// heartbeatFrame is the heartbeat carrying nonce, a valid one (validNonce).
func heartbeatFrame(nonce string) []byte {
	return []byte(heartbeatPrefix + nonce + heartbeatSuffix)
}

// heartbeatAckFrame is the ack of nonce, a valid one (validNonce).
func heartbeatAckFrame(secret []byte, nonce string) []byte {
	return []byte(heartbeatAckPrefix + nonce + heartbeatAckMiddle + MAC(secret, nonce) + heartbeatAckSuffix)
}

// frameKind is what one inbound WebSocket message turned out to be.
type frameKind int

const (
	frameMessage      frameKind = iota + 1 // an MCP message for the session
	frameHeartbeat                         // a server heartbeat (nonce set)
	frameHeartbeatAck                      // an agent's ack (nonce and mac set)
	frameRotate                            // a server's rotation (token set)
	frameRotateAck                         // an agent's rotation ack (mac set)
	frameOffer                             // a server's update offer (offer set)
)

// inbound is one classified WebSocket message.
type inbound struct {
	kind  frameKind
	msg   jsonrpc.Message // frameMessage only
	nonce string          // heartbeat and ack
	mac   string          // heartbeat ack and rotation ack
	token string          // rotation only
	offer Offer           // update offer only
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
	if in, ok := readLinkFrame(data); ok {
		return in, ""
	}
	return decodeFrame(data)
}

// readLinkFrame reads a heartbeat or heartbeat ack written exactly as
// heartbeatFrame and heartbeatAckFrame write them, with valid fields;
// false for anything else, which decodeFrame then reads. Such a frame has
// one meaning to any JSON decoder, so both readings agree on it
// (FuzzReadLinkFrame); this one allocates only the fields, where the
// JSON-RPC decoder takes a 32 KiB buffer for every decode.
func readLinkFrame(data []byte) (inbound, bool) {
	if rest, ok := bytes.CutPrefix(data, []byte(heartbeatAckPrefix)); ok {
		nonce, rest, ok := bytes.Cut(rest, []byte(heartbeatAckMiddle))
		if !ok {
			return inbound{}, false
		}
		mac, ok := bytes.CutSuffix(rest, []byte(heartbeatAckSuffix))
		if !ok || !validNonce(string(nonce)) || len(mac) == 0 || !base64URL(mac) {
			return inbound{}, false
		}
		return inbound{kind: frameHeartbeatAck, nonce: string(nonce), mac: string(mac)}, true
	}
	if rest, ok := bytes.CutPrefix(data, []byte(heartbeatPrefix)); ok {
		nonce, ok := bytes.CutSuffix(rest, []byte(heartbeatSuffix))
		if !ok || !validNonce(string(nonce)) {
			return inbound{}, false
		}
		return inbound{kind: frameHeartbeat, nonce: string(nonce)}, true
	}
	return inbound{}, false
}

// decodeFrame is classify for any text message: the JSON-RPC decoder,
// then the link's own methods' params.
func decodeFrame(data []byte) (inbound, End) {
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
	case MethodOffer:
		o, ok := decodeOffer(req.Params)
		if !ok {
			return inbound{}, EndProtocol
		}
		return inbound{kind: frameOffer, offer: o}, ""
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
	case MethodHeartbeat, MethodHeartbeatAck, MethodRotate, MethodRotateAck, MethodOffer:
		return true
	}
	return false
}

// validNonce reports whether n is a nonce (or MAC) the link accepts: 1 to
// maxNonceBytes of unpadded base64url, and nothing else (the decoder
// alone would skip line breaks), so it goes into a frame as is.
func validNonce(n string) bool {
	if n == "" || len(n) > nonceEncoding.EncodedLen(maxNonceBytes) || !base64URL([]byte(n)) {
		return false
	}
	_, err := nonceEncoding.DecodeString(n)
	return err == nil
}

// base64URL reports whether every byte of b is of the base64url alphabet.
func base64URL(b []byte) bool {
	for _, c := range b {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
