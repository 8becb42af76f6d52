package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/testkit"
	"github.com/commandcore/commandcore/internal/transport"
)

// TestDeviceLinkIsSeenAndKept: a linked device is connected, its last-seen
// time keeps moving while the link lives, a second link from the same
// device is refused with device_busy while the first answers, and the
// device is disconnected when its link ends.
func TestDeviceLinkIsSeenAndKept(t *testing.T) {
	h := newHarness(t, func(s *Server) { s.SeenEvery = 10 * time.Millisecond })
	st, dev := h.st, h.dev
	device := func() store.Device {
		d, err := st.FindDevice(dev.ID)
		if err != nil {
			t.Fatal(err)
		}
		return *d
	}
	waitFor := func(what string, ok func(store.Device) bool) store.Device {
		t.Helper()
		var d store.Device
		testkit.Eventually(t, 20*time.Second, func() error {
			if d = device(); !ok(d) {
				return fmt.Errorf("never %s: %+v", what, d)
			}
			return nil
		})
		return d
	}
	first := h.link(t, fakeDevice())
	seen := waitFor("connected", func(d store.Device) bool { return d.Connected && d.LastSeen != nil })
	waitFor("seen again", func(d store.Device) bool { return d.LastSeen.After(*seen.LastSeen) })

	if _, err := transport.Dial(context.Background(), h.hs.URL, h.current()); !errors.Is(err, transport.ErrBusy) {
		t.Fatalf("a second link while the first answers: %v", err)
	}
	if first.End() != "" {
		t.Fatalf("the refused newcomer ended the first link: %s", first.End())
	}
	if d := device(); !d.Connected {
		t.Fatalf("the refused newcomer disconnected the device: %+v", d)
	}
	first.Close()
	waitFor("disconnected", func(d store.Device) bool { return !d.Connected })

	// A wrong device token never gets a link.
	if _, err := transport.Dial(context.Background(), h.hs.URL, "ccd_"+strings.Repeat("x", 43)); err == nil {
		t.Fatal("an unknown device token was accepted")
	}
}
