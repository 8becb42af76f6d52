package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/testkit"
)

// TestRelayAuditAndMetrics: five calls through a real relay and agent
// show in `relay audit --last 5 --json` (tool, outcome, principal, token,
// device; a marker passed as an argument and printed as output is nowhere
// in the audit or the relay's database) and in the relay's Prometheus
// metrics, which parse as the text format.
func TestRelayAuditAndMetrics(t *testing.T) {
	e := &relayEnv{t: t, relayState: t.TempDir(), agentState: t.TempDir(), agentConfig: t.TempDir()}
	relay, url, metricsURL, err := relaytest.ServeMetrics(bin, "--listen", "127.0.0.1:0", "--state-dir", e.relayState, "--config-dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Process.Signal(syscall.SIGTERM); relay.Wait() })
	e.relay, e.url = relay, url
	e.enrollAgent("dev1") // its second, refused, use of the code is an enrollment refusal
	token, tokenID := e.newToken("dev1", "*")
	c, err := e.connect("/mcp/dev1", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitOnline(t, c, nil)
	m, err := e.connect("/mcp", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	var dev store.Device
	if err := json.Unmarshal([]byte(e.relayCmd("devices", "--json")), &dev); err != nil || dev.ID == "" {
		t.Fatalf("devices: %+v %v", dev, err)
	}
	devID := dev.ID

	marker := "audit-marker-7f3b9c1e"
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, marker+".txt"), []byte(marker), 0o600); err != nil {
		t.Fatal(err)
	}
	var run struct{ Stdout struct{ Data string } }
	c.ok("process.run", map[string]any{"command": "echo " + marker}, &run)
	if !strings.Contains(run.Stdout.Data, marker) {
		t.Fatalf("process.run: %+v", run)
	}
	c.ok("system.metrics", nil, nil)
	c.ok("files.search", map[string]any{"root": root, "name": marker}, nil)
	failCode, _ := c.fail("process.status", map[string]any{"process_id": marker})
	m.ok("devices.list", nil, nil)

	// The log is written behind the calls: wait for the last one.
	var out string
	var got []store.AuditEntry
	testkit.Eventually(t, 10*time.Second, func() error {
		out = e.relayCmd("audit", "--last", "5", "--json")
		got = got[:0]
		for _, line := range strings.Split(out, "\n") {
			var a store.AuditEntry
			if json.Unmarshal([]byte(line), &a) == nil {
				got = append(got, a)
			}
		}
		if len(got) != 5 || got[4].Tool != "devices.list" {
			return fmt.Errorf("the audit never showed the five calls:\n%s", out)
		}
		return nil
	})
	want := []struct{ device, tool, outcome, code string }{
		{devID, "process.run", "ok", ""},
		{devID, "system.metrics", "ok", ""},
		{devID, "files.search", "ok", ""},
		{devID, "process.status", "failed", failCode},
		{"", "devices.list", "ok", ""},
	}
	for i, w := range want {
		a := got[i]
		if a.Principal != tokenID || a.TokenID != tokenID || a.Device != w.device || a.Tool != w.tool || a.Outcome != w.outcome || a.Code != w.code {
			t.Errorf("entry %d: %+v, want %+v", i, a, w)
		}
	}
	table := e.relayCmd("audit", "--last", "5")
	if strings.Count(table, "\n") != 5 || !strings.Contains(table, "process.status") || !strings.Contains(table, tokenID) {
		t.Errorf("audit table:\n%s", table)
	}
	for what, b := range map[string]string{"audit --json": out, "audit table": table} {
		if strings.Contains(b, marker) {
			t.Errorf("the marker is in the %s", what)
		}
	}
	for _, name := range []string{store.File, store.File + "-wal", store.File + "-shm"} {
		b, err := os.ReadFile(filepath.Join(e.relayState, name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(marker)) {
			t.Errorf("the marker is in the relay's %s", name)
		}
	}

	// Metrics: exactly the calls made, by tool and outcome.
	mt, err := relaytest.Scrape(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"commandcore_relay_connected_devices", nil, 1},
		{"commandcore_relay_calls_total", []string{"outcome", "ok", "tool", "process.run"}, 1},
		{"commandcore_relay_calls_total", []string{"outcome", "ok", "tool", "system.metrics"}, 1},
		{"commandcore_relay_calls_total", []string{"outcome", "ok", "tool", "files.search"}, 1},
		{"commandcore_relay_calls_total", []string{"outcome", "failed", "tool", "process.status"}, 1},
		{"commandcore_relay_calls_total", []string{"outcome", "ok", "tool", "devices.list"}, 1},
		{"commandcore_relay_calls_total", []string{"outcome", "ok", "tool", "process.stop"}, 0},
		{"commandcore_relay_call_duration_seconds", []string{"tool", "process.run"}, 1},
		{"commandcore_relay_link_ends_total", []string{"kind", "remote_close"}, 0},
		{"commandcore_relay_audit_dropped_total", nil, 0},
	} {
		if v, ok := mt.Value(s.name, s.labels...); !ok || v != s.want {
			t.Errorf("%s%v = %v (present %v), want %v", s.name, s.labels, v, ok, s.want)
		}
	}
	if n := mt.Sum("commandcore_relay_enroll_refusals_total"); n != 1 {
		t.Errorf("%v enrollment refusals, want 1 (the reused code)", n)
	}

	// The agent stops: its link's end is counted by kind.
	e.agent.Process.Signal(syscall.SIGTERM)
	e.agent.Wait()
	testkit.Eventually(t, 10*time.Second, func() error {
		mt, err := relaytest.Scrape(metricsURL)
		if err != nil {
			t.Fatal(err)
		}
		ends, _ := mt.Value("commandcore_relay_link_ends_total", "kind", "remote_close")
		conn, _ := mt.Value("commandcore_relay_connected_devices")
		if ends != 1 || conn != 0 {
			return fmt.Errorf("after the agent stopped: %v remote_close ends, %v connected", ends, conn)
		}
		return nil
	})
}
