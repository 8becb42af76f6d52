package relay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/link"
	"github.com/commandcore/commandcore/internal/relaystate"
)

// TestDeviceLinkIsSeenAndReplaced: a linked device is connected, its
// last-seen time keeps moving while the link lives, a second link from
// the same device replaces the first, and the device is disconnected when
// its link ends.
func TestDeviceLinkIsSeenAndReplaced(t *testing.T) {
	h := newHarness(t, func(s *Server) { s.SeenEvery = 10 * time.Millisecond })
	st, dev := h.st, h.dev
	device := func() relaystate.Device {
		d, err := st.FindDevice(dev.ID)
		if err != nil {
			t.Fatal(err)
		}
		return *d
	}
	waitFor := func(what string, ok func(relaystate.Device) bool) relaystate.Device {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if d := device(); ok(d) {
				return d
			}
			if time.Now().After(deadline) {
				t.Fatalf("never %s: %+v", what, device())
			}
		}
	}
	first := h.link(t, fakeDevice())
	seen := waitFor("connected", func(d relaystate.Device) bool { return d.Connected && d.LastSeen != nil })
	waitFor("seen again", func(d relaystate.Device) bool { return d.LastSeen.After(*seen.LastSeen) })

	second := h.link(t, fakeDevice())
	select {
	case <-first.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("a second link did not replace the first")
	}
	if d := device(); !d.Connected {
		t.Fatalf("the replaced link disconnected the device: %+v", d)
	}
	second.Close()
	waitFor("disconnected", func(d relaystate.Device) bool { return !d.Connected })

	// A wrong device token never gets a link.
	if _, err := link.Dial(context.Background(), h.hs.URL, "ccd_"+strings.Repeat("x", 43)); err == nil {
		t.Fatal("an unknown device token was accepted")
	}
}
