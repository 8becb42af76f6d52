package transport

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

func TestMAC(t *testing.T) {
	nonce := nonceEncoding.EncodeToString([]byte("0123456789abcdef"))
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("0123456789abcdef"))
	want := nonceEncoding.EncodeToString(m.Sum(nil))
	if got := MAC(secret, nonce); got != want {
		t.Fatalf("MAC = %q, want %q", got, want)
	}
	if MAC(secret, "not base64!") != "" {
		t.Fatal("MAC of a bad nonce is not empty")
	}
	if !verifyMAC(secret, nonce, want) || verifyMAC(otherSecret, nonce, want) || verifyMAC(secret, nonce, "") {
		t.Fatal("verifyMAC")
	}
}

func TestClassify(t *testing.T) {
	hb := heartbeatFrame("AAAAAAAAAAAAAAAAAAAAAA")
	ack := heartbeatAckFrame(secret, "AAAAAAAAAAAAAAAAAAAAAA")
	longest := nonceEncoding.EncodeToString(make([]byte, maxNonceBytes))
	tooLong := nonceEncoding.EncodeToString(make([]byte, maxNonceBytes+1))
	rot, _ := rotateFrame("ccd_t")
	rotAck, _ := rotateAckFrame(secret, "ccd_t")
	for _, tc := range []struct {
		name string
		typ  int
		data string
		kind frameKind
		end  End
	}{
		{"request", websocket.TextMessage, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`, frameMessage, ""},
		{"response", websocket.TextMessage, `{"jsonrpc":"2.0","id":1,"result":{}}`, frameMessage, ""},
		{"notification", websocket.TextMessage, `{"jsonrpc":"2.0","method":"notifications/progress"}`, frameMessage, ""},
		{"heartbeat", websocket.TextMessage, string(hb), frameHeartbeat, ""},
		{"heartbeat extra fields", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodHeartbeat + `","params":{"nonce":"AAAA","v":2}}`, frameHeartbeat, ""},
		{"ack", websocket.TextMessage, string(ack), frameHeartbeatAck, ""},
		{"binary", websocket.BinaryMessage, `{"jsonrpc":"2.0","method":"x"}`, 0, EndProtocol},
		{"garbage", websocket.TextMessage, "\x00\xff", 0, EndProtocol},
		{"empty", websocket.TextMessage, "", 0, EndProtocol},
		{"no version", websocket.TextMessage, `{"method":"x"}`, 0, EndProtocol},
		{"response without id", websocket.TextMessage, `{"jsonrpc":"2.0","result":{}}`, 0, EndProtocol},
		{"heartbeat as call", websocket.TextMessage, `{"jsonrpc":"2.0","id":7,"method":"` + MethodHeartbeat + `","params":{"nonce":"AAAA"}}`, 0, EndProtocol},
		{"heartbeat nonce with a line break", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodHeartbeat + `","params":{"nonce":"AAAA\nAAAA"}}`, 0, EndProtocol},
		{"heartbeat bad nonce", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodHeartbeat + `","params":{"nonce":"a+b/"}}`, 0, EndProtocol},
		{"heartbeat longest nonce", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodHeartbeat + `","params":{"nonce":"` + longest + `"}}`, frameHeartbeat, ""},
		{"heartbeat long nonce", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodHeartbeat + `","params":{"nonce":"` + tooLong + `"}}`, 0, EndProtocol},
		{"heartbeat params array", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodHeartbeat + `","params":[1]}`, 0, EndProtocol},
		{"ack spaced out", websocket.TextMessage, `{"jsonrpc": "2.0", "method": "` + MethodHeartbeatAck + `", "params": {"mac": "AAAA", "nonce": "AAAA"}}`, frameHeartbeatAck, ""},
		{"ack escaped", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodHeartbeatAck + `","params":{"nonce":"AA\u0041A","mac":"AAAA"}}`, frameHeartbeatAck, ""},
		{"ack with an id", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodHeartbeatAck + `","params":{"nonce":"AAAA","mac":"AAAA"},"id":1}`, 0, EndProtocol},
		{"ack cut short", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodHeartbeatAck + `","params":{"nonce":"AAAA","mac":"AAAA"}`, 0, EndProtocol},
		{"ack without mac", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodHeartbeatAck + `","params":{"nonce":"AAAA"}}`, 0, EndProtocol},
		{"ack without nonce", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodHeartbeatAck + `","params":{"mac":"AAAA"}}`, 0, EndProtocol},
		{"ack bad nonce", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodHeartbeatAck + `","params":{"nonce":"a+b/","mac":"AAAA"}}`, 0, EndProtocol},
		{"ack long nonce", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodHeartbeatAck + `","params":{"nonce":"` + tooLong + `","mac":"AAAA"}}`, 0, EndProtocol},
		{"rotation", websocket.TextMessage, string(rot), frameRotate, ""},
		{"rotation extra fields", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodRotate + `","params":{"token":"t","v":2}}`, frameRotate, ""},
		{"rotation ack", websocket.TextMessage, string(rotAck), frameRotateAck, ""},
		{"rotation as call", websocket.TextMessage, `{"jsonrpc":"2.0","id":1,"method":"` + MethodRotate + `","params":{"token":"t"}}`, 0, EndProtocol},
		{"rotation without token", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodRotate + `","params":{}}`, 0, EndProtocol},
		{"rotation header injection", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodRotate + `","params":{"token":"t\r\nX: y"}}`, 0, EndProtocol},
		{"rotation ack bad mac", websocket.TextMessage, `{"jsonrpc":"2.0","method":"` + MethodRotateAck + `","params":{"mac":"a+b/"}}`, 0, EndProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, end := classify(tc.typ, []byte(tc.data))
			if end != tc.end || f.kind != tc.kind {
				t.Fatalf("classify = kind %d end %q, want kind %d end %q", f.kind, end, tc.kind, tc.end)
			}
			// A refused frame is the zero inbound: no accepted kind may be zero.
			if (end == "") == (f.kind == 0) {
				t.Fatalf("kind %d with end %q", f.kind, end)
			}
			if tc.kind == frameMessage && f.msg == nil {
				t.Fatal("no message")
			}
		})
	}
}

// TestLinkFramesAsEncodingJSONWritesThem: the heartbeat and ack frames are what
// encoding/json writes for them, the form every earlier agent and relay
// sent, so readLinkFrame reads what peers send.
func TestLinkFramesAsEncodingJSONWritesThem(t *testing.T) {
	nonce, err := newNonce()
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := json.Marshal(notification{JSONRPC: "2.0", Method: MethodHeartbeat, Params: heartbeatParams{Nonce: nonce}})
	ack, _ := json.Marshal(notification{JSONRPC: "2.0", Method: MethodHeartbeatAck,
		Params: heartbeatAckParams{Nonce: nonce, MAC: MAC(secret, nonce)}})
	if got := heartbeatFrame(nonce); !bytes.Equal(got, hb) {
		t.Fatalf("heartbeat %s, encoding/json %s", got, hb)
	}
	if got := heartbeatAckFrame(secret, nonce); !bytes.Equal(got, ack) {
		t.Fatalf("ack %s, encoding/json %s", got, ack)
	}
	for _, frame := range [][]byte{hb, ack} {
		if _, ok := readLinkFrame(frame); !ok {
			t.Fatalf("%s is not read without the JSON-RPC decoder", frame)
		}
	}
	if in, ok := readLinkFrame(ack); in.kind != frameHeartbeatAck || in.nonce != nonce || in.mac != MAC(secret, nonce) || !ok {
		t.Fatalf("ack read as %+v", in)
	}
}

// FuzzReadLinkFrame: whatever readLinkFrame accepts, the JSON-RPC decoder
// reads the same way.
func FuzzReadLinkFrame(f *testing.F) {
	f.Add(heartbeatFrame("AAAAAAAAAAAAAAAAAAAAAA"))
	f.Add(heartbeatAckFrame(secret, "AAAAAAAAAAAAAAAAAAAAAA"))
	f.Add([]byte(heartbeatAckPrefix + "AAAA" + heartbeatAckMiddle + heartbeatAckMiddle + "AAAA" + heartbeatAckSuffix))
	f.Add([]byte(heartbeatPrefix + "AA\"AA" + heartbeatSuffix))
	f.Add([]byte(heartbeatPrefix + heartbeatSuffix))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, ok := readLinkFrame(data)
		if !ok {
			return
		}
		want, end := decodeFrame(data)
		if end != "" || in != want {
			t.Fatalf("read as %+v, decoded as %+v (%q)", in, want, end)
		}
	})
}

func FuzzInbound(f *testing.F) {
	hb := heartbeatFrame("AAAAAAAAAAAAAAAAAAAAAA")
	ack := heartbeatAckFrame(secret, "AAAAAAAAAAAAAAAAAAAAAA")
	rot, _ := rotateFrame("ccd_t")
	rotAck, _ := rotateAckFrame(secret, "ccd_t")
	for _, s := range []string{
		string(hb), string(ack), string(rot), string(rotAck),
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`,
		`{"jsonrpc":"2.0","id":"a","result":{}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"m"}}`,
		`{"jsonrpc":"2.0","method":"` + MethodHeartbeat + `","params":null}`,
		`{"jsonrpc":"2.0","method":"` + MethodHeartbeatAck + `","params":{"nonce":"","mac":""}}`,
		"", "null", "[]", "{", "\xff",
	} {
		f.Add(false, []byte(s))
		f.Add(true, []byte(s))
	}
	f.Fuzz(func(t *testing.T, binary bool, data []byte) {
		typ := websocket.TextMessage
		if binary {
			typ = websocket.BinaryMessage
		}
		in, end := classify(typ, data)
		switch end {
		case "":
		case EndProtocol:
			if in.kind != 0 || in.msg != nil {
				t.Fatal("a refused frame carries content")
			}
			return
		default:
			t.Fatalf("classify returned %q", end)
		}
		if binary {
			t.Fatal("a binary frame was accepted")
		}
		switch in.kind {
		case frameMessage:
			if in.msg == nil {
				t.Fatal("message kind without message")
			}
			if r, ok := in.msg.(*jsonrpc.Request); ok && linkMethod(r.Method) {
				t.Fatal("a link frame would reach the MCP session")
			}
			if _, err := jsonrpc.EncodeMessage(in.msg); err != nil {
				t.Logf("re-encode: %v", err)
			}
		case frameHeartbeat:
			if !validNonce(in.nonce) || !verifyMAC(secret, in.nonce, MAC(secret, in.nonce)) {
				t.Fatal("heartbeat nonce cannot be answered")
			}
		case frameHeartbeatAck:
			if !validNonce(in.nonce) || in.mac == "" {
				t.Fatal("ack fields")
			}
			_ = verifyMAC(secret, in.nonce, in.mac)
		case frameRotate:
			if !ValidToken(in.token) {
				t.Fatal("rotation token fields")
			}
		case frameRotateAck:
			if !validNonce(in.mac) {
				t.Fatal("rotation ack fields")
			}
		default:
			t.Fatalf("kind %d", in.kind)
		}
	})
}
