package relay

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/isolation"
	"github.com/commandcore/commandcore/internal/testkit"
)

// checkingDevice is a device whose process.status verifies each call's
// grant as the agent does, against the arguments exactly as they reached
// it, and answers whether the grant named its call. announce says whether
// it tells the relay that it checks call digests.
func checkingDevice(pub ed25519.PublicKey, deviceID string, announce bool) *mcp.Server {
	opts := &mcp.ServerOptions{}
	if announce {
		opts.Capabilities = &mcp.ServerCapabilities{Experimental: map[string]any{authz.BindsCallsCapability: map[string]any{}}}
	}
	d := mcp.NewServer(&mcp.Implementation{Name: "checking-device", Version: "1"}, opts)
	d.AddTool(&mcp.Tool{Name: "process.status", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			c, err := authz.VerifyGrant(pub, authz.GrantFromMeta(r.Params.GetMeta()), deviceID, "process.status", r.Params.Arguments, time.Now())
			if err != nil {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("bound=%v", c.Call != "")}}}, nil
		})
	return d
}

// TestGrantsBindTheCallTheDeviceReceives: for an agent that checks call
// digests, every grant the relay mints names the call, and the digest is
// of the arguments exactly as they reach the device: on the device's own
// endpoint as the client wrote them (spacing and escapes kept), and on
// the multi-device endpoint with the device argument taken out. An agent
// that did not announce the check gets grants naming no call, which its
// strict decoder would otherwise refuse.
func TestGrantsBindTheCallTheDeviceReceives(t *testing.T) {
	for _, announce := range []bool{true, false} {
		t.Run(fmt.Sprintf("announce=%v", announce), func(t *testing.T) {
			h := newHarness(t, nil)
			pub := h.srv.key.Public().(ed25519.PublicKey)
			h.link(t, checkingDevice(pub, h.dev.ID, announce))
			testkit.Eventually(t, 10*time.Second, func() error {
				d, err := h.st.FindDevice(h.dev.ID)
				if err != nil || d.AgentVersion == "" {
					return fmt.Errorf("the link's agent is not recorded yet (%v)", err)
				}
				if d.BindsCalls != announce {
					return fmt.Errorf("binds calls %v, want %v", d.BindsCalls, announce)
				}
				return nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			want := fmt.Sprintf("bound=%v", announce)
			for path, args := range map[string]json.RawMessage{
				"/mcp/dev": json.RawMessage(`{"process_id":"a\u00e9","n":1.50}`),
				"/mcp":     json.RawMessage(`{"device":"dev","process_id":"b","n":[1, 2]}`),
			} {
				cs := h.connect(t, path, nil)
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "process.status", Arguments: args})
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				if text := res.Content[0].(*mcp.TextContent).Text; res.IsError || text != want {
					t.Errorf("%s: isError %v %q, want %q", path, res.IsError, text, want)
				}
			}
		})
	}
}

// TestTheLinksAgentSaysHowJobsAreKeptFromIt: what an agent announces at
// initialize of how its jobs are kept from it is recorded for the
// device's page, and a word outside its set is recorded as unknown.
func TestTheLinksAgentSaysHowJobsAreKeptFromIt(t *testing.T) {
	h := newHarness(t, nil)
	d := mcp.NewServer(&mcp.Implementation{Name: "isolated-device", Version: "1"}, &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{
		Experimental: map[string]any{isolation.Capability: map[string]any{"agent_binary": "read_only_in_units", "user_manager": "/home/u"}}}})
	h.link(t, d)
	testkit.Eventually(t, 10*time.Second, func() error {
		d, err := h.st.FindDevice(h.dev.ID)
		if err != nil || d.AgentVersion == "" {
			return fmt.Errorf("the link's agent is not recorded yet (%v)", err)
		}
		if want := (isolation.Report{AgentBinary: isolation.BinaryReadOnlyInUnits}); d.Isolation != want {
			return fmt.Errorf("recorded %+v, want %+v", d.Isolation, want)
		}
		return nil
	})
}

// TestGrantsAreNumberedForAgentsThatTakeThem: an agent that announces it
// takes numbered grants gets each call's grant numbered by this relay
// process, one after another under one minter; an agent that does not
// gets grants without a number, which its strict decoder would refuse.
func TestGrantsAreNumberedForAgentsThatTakeThem(t *testing.T) {
	for _, announce := range []bool{true, false} {
		t.Run(fmt.Sprintf("announce=%v", announce), func(t *testing.T) {
			h := newHarness(t, nil)
			pub := h.srv.key.Public().(ed25519.PublicKey)
			opts := &mcp.ServerOptions{}
			if announce {
				opts.Capabilities = &mcp.ServerCapabilities{Experimental: map[string]any{authz.GrantSequenceCapability: map[string]any{}}}
			}
			d := mcp.NewServer(&mcp.Implementation{Name: "numbered-device", Version: "1"}, opts)
			d.AddTool(&mcp.Tool{Name: "process.status", InputSchema: map[string]any{"type": "object"}},
				func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					c, err := authz.VerifyGrant(pub, authz.GrantFromMeta(r.Params.GetMeta()), h.dev.ID, "process.status", r.Params.Arguments, time.Now())
					if err != nil {
						return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
					}
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("mint=%s seq=%d", c.Minter, c.Seq)}}}, nil
				})
			h.link(t, d)
			testkit.Eventually(t, 10*time.Second, func() error {
				d, err := h.st.FindDevice(h.dev.ID)
				if err != nil || d.AgentVersion == "" {
					return fmt.Errorf("the link's agent is not recorded yet (%v)", err)
				}
				if d.NumbersGrants != announce {
					return fmt.Errorf("numbers grants %v, want %v", d.NumbersGrants, announce)
				}
				return nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cs := h.connect(t, "/mcp/dev", nil)
			var minter string
			var last uint64
			for i := range 3 {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "process.status", Arguments: map[string]any{}})
				if err != nil || res.IsError {
					t.Fatalf("call %d: %v %+v", i, err, res)
				}
				text := res.Content[0].(*mcp.TextContent).Text
				if !announce {
					if text != "mint= seq=0" {
						t.Fatalf("call %d: numbered %q", i, text)
					}
					continue
				}
				var m string
				var seq uint64
				if _, err := fmt.Sscanf(text, "mint=%s seq=%d", &m, &seq); err != nil {
					t.Fatalf("call %d: %q: %v", i, text, err)
				}
				if len(m) != 16 || seq <= last || (minter != "" && m != minter) {
					t.Fatalf("call %d numbered %s/%d after %s/%d", i, m, seq, minter, last)
				}
				minter, last = m, seq
			}
		})
	}
}
