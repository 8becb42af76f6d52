package relay

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/enrollment"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/testkit"
)

// TestADeviceLeaves: a device that says, with its own token, that it
// leaves (its agent uninstalled with its identity) is marked removed, its
// link ends, its token is refused from then on, and the audit says so; a
// URL of the relay that does not answer is passed over for the next, and
// a token the relay does not know is refused without a change.
func TestADeviceLeaves(t *testing.T) {
	h := newHarness(t, nil)
	conn := h.link(t, mcp.NewServer(&mcp.Implementation{Name: "leaving-device", Version: "1"}, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := enrollment.Leave(ctx, &enrollment.Credential{Server: h.hs.URL, Token: "ccd_not-a-token"}); err == nil || !strings.Contains(err.Error(), "the server refused") {
		t.Fatalf("leaving with an unknown token: %v", err)
	}
	if d, _ := h.st.FindDevice(h.dev.ID); d.Standing != store.StandingActive {
		t.Fatalf("an unknown token changed the device: %s", d.Standing)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + closed.Addr().String()
	closed.Close()
	id := &enrollment.Credential{Server: gone, Servers: []string{gone, h.hs.URL}, Token: h.current()}
	server, err := enrollment.Leave(ctx, id)
	if err != nil || server != h.hs.URL {
		t.Fatalf("Leave: %q, %v", server, err)
	}
	d, err := h.st.FindDevice(h.dev.ID)
	if err != nil || d.Standing != store.StandingRemoved {
		t.Fatalf("the device after it left: %+v %v", d, err)
	}
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the device's link outlived its leaving")
	}
	if _, _, err := h.st.AuthDevice(h.current(), time.Now()); err == nil {
		t.Fatal("a removed device's token is still taken")
	}
	if _, err := enrollment.Leave(ctx, id); err == nil {
		t.Fatal("a removed device left again")
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		entries, err := h.st.Audit(10)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Tool == "relay.device_leave" && e.Device == h.dev.ID && e.Outcome == store.AuditOK {
				return nil
			}
		}
		return fmt.Errorf("no audit entry of the device leaving: %+v", entries)
	})
}
