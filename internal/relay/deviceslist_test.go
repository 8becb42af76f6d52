package relay

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// TestDevicesListText pins devices.list's text content: a line a device,
// its name, connected or when it was last seen, its standing and its
// agent's version, never the JSON again; many devices stop short of
// limits.MaxToolTextChars, saying how many more the structured result
// holds.
func TestDevicesListText(t *testing.T) {
	seen := time.Date(2026, 5, 1, 12, 0, 0, 0, time.FixedZone("CEST", 7200))
	for _, tc := range []struct {
		name string
		list DeviceList
		want string
	}{
		{"none", DeviceList{}, "no device this token may reach\n"},
		{"some", DeviceList{Devices: []store.Device{
			{Name: "build-box", Connected: true, Standing: store.StandingActive, AgentVersion: "1.4.2"},
			{Name: "laptop", LastSeen: &seen, Standing: store.StandingActive, AgentVersion: "1.4.1", UpdateOffer: "1.4.2"},
			{Name: "old", Standing: store.StandingRevoked},
		}}, "3 devices this token may reach:\n" +
			"build-box: connected, active, agent 1.4.2\n" +
			"laptop: offline, last seen 2026-05-01T10:00:00Z, active, agent 1.4.1 (1.4.2 offered)\n" +
			"old: offline, never seen, revoked\n"},
	} {
		if got := devicesText(&tc.list); got != tc.want {
			t.Errorf("%s: text\n%q\nwant\n%q", tc.name, got, tc.want)
		}
	}

	var many DeviceList
	for i := range 5000 {
		many.Devices = append(many.Devices, store.Device{Name: fmt.Sprintf("device-%04d-%s", i, strings.Repeat("n", 40)), LastSeen: &seen,
			Standing: store.StandingCompromised, AgentVersion: "1.4.1-rc.1+dirty", UpdateOffer: "1.4.2"})
	}
	text := devicesText(&many)
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	listed := len(lines) - 2
	if len(text) >= limits.MaxToolTextChars || listed < 100 ||
		lines[len(lines)-1] != fmt.Sprintf("... %d more devices in the structured result", len(many.Devices)-listed) {
		t.Errorf("%d bytes of text, %d devices listed, ending %q", len(text), listed, lines[len(lines)-1])
	}
}

// TestDevicesListAnswersInWords: through the relay, devices.list's text
// names each device and whether it is connected; the structured content
// keeps the list.
func TestDevicesListAnswersInWords(t *testing.T) {
	h := newHarness(t, nil)
	code, err := h.st.CreateEnrollCode("box", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := h.st.Enroll(code, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	h.link(t, fakeDevice())
	res, err := h.connect(t, "/mcp", nil).CallTool(context.Background(), &mcp.CallToolParams{Name: DevicesListTool, Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("devices.list: %v %+v", err, res)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if !strings.HasPrefix(text, "2 devices this token may reach:\nbox: offline, never seen, active\ndev: connected, active") {
		t.Errorf("text %q", text)
	}
	if sc, ok := res.StructuredContent.(map[string]any); !ok || len(sc["devices"].([]any)) != 2 {
		t.Errorf("structured content %#v", res.StructuredContent)
	}
}
