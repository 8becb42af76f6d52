package transport

import (
	"context"
	"encoding/json"
	"errors"
)

// MethodOffer carries an update offer, server to agent: the agent binary
// the server serves for the agent's architecture when its version differs
// from the agent's. Like the heartbeats it is a notification that lives
// only on the link. What the agent does with it is its own to decide
// (internal/selfupdate).
const MethodOffer = "notifications/commandcore/update_offer"

// ArchHeader names, in the link's handshake, the agent's architecture (Go's
// spelling), so the server offers the binary for it.
const ArchHeader = "Commandcore-Arch"

// maxOfferField bounds each text field of an offer.
const maxOfferField = 128

// Offer is an update offer: a version, the SHA-256 of its binary (hex),
// the binary's name under the server's /download/, and whether the server
// asks the agent to update now (its policy is auto, or a person asked).
type Offer struct {
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	Name    string `json:"name"`
	Apply   bool   `json:"apply,omitempty"`
}

func offerFrame(o Offer) ([]byte, error) {
	return json.Marshal(notification{JSONRPC: "2.0", Method: MethodOffer, Params: o})
}

// decodeOffer reads an offer's params, or false when they are malformed:
// every text field 1 to maxOfferField bytes of printable ASCII. Unknown
// fields are ignored (the fields are additive).
func decodeOffer(params json.RawMessage) (Offer, bool) {
	var o Offer
	if json.Unmarshal(params, &o) != nil || !validOffer(o) {
		return Offer{}, false
	}
	return o, true
}

func validOffer(o Offer) bool {
	for _, s := range []string{o.Version, o.SHA256, o.Name} {
		if s == "" || len(s) > maxOfferField {
			return false
		}
		for i := 0; i < len(s); i++ {
			if s[i] <= ' ' || s[i] > '~' {
				return false
			}
		}
	}
	return true
}

// Offer sends the agent an update offer. Server end only; it returns once
// the frame is queued, or when ctx or the link ends.
func (c *Conn) Offer(ctx context.Context, o Offer) error {
	if c.role != roleServer {
		return errors.New("link: only the server end offers updates")
	}
	if !validOffer(o) {
		return errors.New("link: malformed update offer")
	}
	frame, err := offerFrame(o)
	if err != nil {
		return errors.New("link: cannot encode the update offer")
	}
	select {
	case c.ctrl <- frame:
		return nil
	case <-c.done:
		return c.ended()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// takeOffer is the agent end's handling of an offer: Options.Offer gets
// it, on the link's reader. The server end ignores offers.
func (c *Conn) takeOffer(o Offer) {
	if c.role == roleAgent && c.opt.Offer != nil {
		c.opt.Offer(o)
	}
}
