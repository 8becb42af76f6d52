package e2e

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/natstest"
	"github.com/commandcore/commandcore/internal/pgtest"
	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// TestPanelUpdateReachesTheReplicaHoldingTheLink: two replicas on one
// PostgreSQL database joined through NATS, each serving a release of
// another version; the device links to replica 1 while the admin uses
// replica 0's panel. The Device page shows the agent outdated, and its
// Update reaches the agent through the replica that holds the link: the
// agent, not running as a service, journals the update it was asked for
// as refused.
func TestPanelUpdateReachesTheReplicaHoldingTheLink(t *testing.T) {
	binary, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	release := releaseOf(t, "9.9.9", binary)
	ns := natstest.Start(t)
	pg := pgtest.StartT(t)
	db, err := pg.CreateDatabase("relay")
	if err != nil {
		t.Fatal(err)
	}
	e := &relayEnv{t: t, relayState: t.TempDir(), agentState: t.TempDir(), agentConfig: t.TempDir(), database: db}
	var urls, panels []string
	for i := range 2 {
		cmd, u, panelURL, err := relaytest.ServePanelLogged(bin, &syncBuffer{}, "--listen", "127.0.0.1:0", "--state-dir", t.TempDir(),
			"--config-dir", t.TempDir(), "--database", db, "--nats", ns.ClientURL(), "--name", fmt.Sprintf("r%d", i), "--downloads", release)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
		urls, panels = append(urls, u), append(panels, panelURL)
	}
	e.url = urls[1]
	e.enrollAgent("dev1")
	var device string
	testkit.Eventually(t, 20*time.Second, func() error {
		out := e.relayCmd("devices", "--json")
		if !strings.Contains(out, `"9.9.9"`) {
			return fmt.Errorf("relay devices does not show the offer yet: %s", out)
		}
		_, rest, _ := strings.Cut(out, `"id":"`)
		device, _, _ = strings.Cut(rest, `"`)
		return nil
	})

	p := &panelEnv{relayEnv: e, panel: panels[0], b: newBrowser(t, strings.TrimSuffix(panels[0], "panel/"))}
	link, err := url.Parse(e.relayCmd("admin", "create", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	p.b.open(panels[0] + "login?code=" + link.Query().Get("code"))
	p.b.submit("#signin")
	p.b.open(panels[0] + "devices/" + device)
	if got := p.b.text("#agent-outdated"); got != "outdated" {
		t.Fatalf("the Device page marks the agent %q", got)
	}
	p.b.submit("#agent-update")
	if path := eval[string](p.b, "location.pathname"); path != "/panel/devices/"+device {
		t.Fatalf("after Update at %s: %s", path, p.b.text("main"))
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		out, _, _ := run(t, "activity", "--state-dir", e.agentState, "--last", "50")
		if !strings.Contains(out, "update_refused") {
			return fmt.Errorf("the agent's journal shows no update asked for:\n%s", out)
		}
		return nil
	})
}
