package transport

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

var testOffer = Offer{Version: "1.2.0", SHA256: strings.Repeat("ab", 32), Name: "commandcore-linux-amd64", Apply: true}

// TestOfferReachesTheAgentOnly: the server's offer reaches the agent's
// Offer and never either MCP session; the agent end cannot offer.
func TestOfferReachesTheAgentOnly(t *testing.T) {
	cws, sws := tcpWS(t, nil)
	got := make(chan Offer, 1)
	agent := Agent(cws, secret, Options{Offer: func(o Offer) { got <- o }})
	defer agent.Close()
	server := Server(sws, secret, noBeat)
	defer server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := server.Offer(ctx, testOffer); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-got:
		if o != testOffer {
			t.Fatalf("the agent got %+v", o)
		}
	case <-time.After(patience):
		t.Fatal("the offer never arrived")
	}
	if err := agent.Offer(ctx, testOffer); err == nil {
		t.Error("the agent end offered an update")
	}
	bad := testOffer
	bad.Name = "two words"
	if err := server.Offer(ctx, bad); err == nil {
		t.Error("a malformed offer was sent")
	}
	rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer rcancel()
	if _, err := agent.Read(rctx); err == nil {
		t.Error("the offer reached the agent's MCP session")
	}
	if agent.End() != "" || server.End() != "" {
		t.Fatalf("ended: agent %q server %q", agent.End(), server.End())
	}
}

// A malformed offer is a protocol error, as a malformed rotation is.
func TestMalformedOfferEndsTheLink(t *testing.T) {
	cws, sws := tcpWS(t, nil)
	agent := Agent(cws, secret, Options{})
	defer agent.Close()
	writeText(t, sws, `{"jsonrpc":"2.0","method":"`+MethodOffer+`","params":{"version":"1.0.0","sha256":"","name":"x"}}`)
	waitEnd(t, agent, EndProtocol)
}

// FuzzDecodeOffer: a decoded offer's fields are printable, bounded and
// survive the round trip through the frame the server writes.
func FuzzDecodeOffer(f *testing.F) {
	for _, s := range []string{
		`{"version":"1.2.0","sha256":"` + testOffer.SHA256 + `","name":"commandcore-linux-amd64","apply":true}`,
		`{"version":"1","sha256":"a","name":"b","v":2}`, `{"version":"","sha256":"a","name":"b"}`,
		`{"version":"a b","sha256":"a","name":"b"}`, `{"version":7}`, "null", "[]", "{", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		o, ok := decodeOffer(params)
		if !ok {
			if o != (Offer{}) {
				t.Fatal("a refused offer carries fields")
			}
			return
		}
		frame, err := offerFrame(o)
		if err != nil {
			t.Fatal(err)
		}
		in, end := classify(websocket.TextMessage, frame)
		if end != "" || in.kind != frameOffer || in.offer != o {
			t.Fatal("a decoded offer does not round-trip")
		}
	})
}
