package cluster

import (
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"
)

// sealVersion starts every sealed message and its associated data, so a
// later format is never read as this one.
const sealVersion byte = 1

// maxHeadBytes bounds a message's sealed head: far above a head with the
// largest grant, below the part headroom.
const maxHeadBytes = 3 << 10

// head is what a message says about itself, sealed with its body. Call
// names the call (or link probe) every message of it belongs to, a random
// ID the sender made; the rest depends on the message.
type head struct {
	Call string `json:"c"`
	// Kind is an answer's kind (kindProgress, …) or a probe answer's
	// verdict.
	Kind string `json:"k,omitempty"`
	// Seq numbers an answer's messages from 1; Part a request's parts.
	Seq  int  `json:"s,omitempty"`
	Part int  `json:"p,omitempty"`
	More bool `json:"m,omitempty"`
	// The request: whose link, which tool with which grant, until when,
	// and where its answers and cancellation go.
	Device   string `json:"d,omitempty"`
	Tool     string `json:"t,omitempty"`
	Grant    string `json:"g,omitempty"`
	Deadline int64  `json:"dl,omitempty"`
	Reply    string `json:"r,omitempty"`
	Cancel   string `json:"x,omitempty"`
	Progress bool   `json:"pr,omitempty"`
	NoArgs   bool   `json:"na,omitempty"`
}

// sealer seals and opens the replicas' messages with the cluster key
// (XChaCha20-Poly1305: its 24-byte random nonces never repeat in practice,
// however many messages a cluster sends under one key). The subject a
// message is published on is its associated data, so a sealed message
// moved to another subject (another call's inbox, another replica) does
// not open.
type sealer struct{ aead cipher.AEAD }

// errForged: a message that does not open under the cluster key.
var errForged = errors.New("the message is not sealed with the cluster key")

func newSealer(key []byte) (*sealer, error) {
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, fmt.Errorf("cluster key: %w", err)
	}
	return &sealer{aead: aead}, nil
}

// seal returns the body of a message on subject saying h and carrying
// data: the version, the nonce, then head and data sealed.
func (s *sealer) seal(subject string, h *head, data []byte) []byte {
	hb, err := json.Marshal(h)
	if err != nil {
		// A head is strings, numbers and booleans: it always encodes.
		panic(err)
	}
	plain := make([]byte, 2, 2+len(hb)+len(data))
	binary.BigEndian.PutUint16(plain, uint16(len(hb)))
	plain = append(append(plain, hb...), data...)
	n := 1 + chacha20poly1305.NonceSizeX
	out := make([]byte, n, n+len(plain)+chacha20poly1305.Overhead)
	out[0] = sealVersion
	rand.Read(out[1:n])
	out = s.aead.Seal(out, out[1:n], plain, associated(subject))
	clear(plain)
	return out
}

// open reads a message on subject sealed by seal; errForged for anything
// else, untouched or altered.
func (s *sealer) open(subject string, body []byte) (*head, []byte, error) {
	n := 1 + chacha20poly1305.NonceSizeX
	if len(body) < n+chacha20poly1305.Overhead || body[0] != sealVersion {
		return nil, nil, errForged
	}
	plain, err := s.aead.Open(nil, body[1:n], body[n:], associated(subject))
	if err != nil || len(plain) < 2 {
		return nil, nil, errForged
	}
	hl := int(binary.BigEndian.Uint16(plain))
	if hl > len(plain)-2 || hl > maxHeadBytes {
		return nil, nil, errForged
	}
	var h head
	if err := json.Unmarshal(plain[2:2+hl], &h); err != nil || h.Call == "" {
		return nil, nil, errForged
	}
	return &h, plain[2+hl:], nil
}

func associated(subject string) []byte {
	return append([]byte{sealVersion}, subject...)
}
