package install_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/install"
	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// TestInstalledAgentLinksAfterEnrollment is the production path: the agent
// runs as an installed user service; enrolling afterwards is enough for it
// to link to the relay (no restart), status reports the link, and a
// client reaches a job running under the user manager through the relay.
func TestInstalledAgentLinksAfterEnrollment(t *testing.T) {
	relayState := t.TempDir()
	relay, url, err := relaytest.Serve(bin, "--listen", "127.0.0.1:0", "--state-dir", relayState, "--config-dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Process.Signal(syscall.SIGTERM); relay.Wait() })

	o := options(t)
	if err := install.Install(ctxFor(t), o); err != nil {
		t.Fatal(err)
	}
	code, rc := run(t, "relay", "enroll-code", "--name", "svc", "--state-dir", relayState)
	if rc != 0 {
		t.Fatal("enroll-code failed")
	}
	if _, rc := run(t, "enroll", "--server", url, "--code", strings.TrimSpace(code), "--service", o.Service, "--state-dir", o.StateDir, "--config-dir", o.ConfigDir); rc != 0 {
		t.Fatal("enroll failed")
	}
	testkit.EventuallyEvery(t, 40*time.Second, 100*time.Millisecond, func() error {
		out, _ := run(t, "status", "--json", "--service", o.Service, "--state-dir", o.StateDir, "--config-dir", o.ConfigDir)
		var st struct {
			Connection struct{ State, Server string } `json:"connection"`
		}
		json.Unmarshal([]byte(out), &st)
		if st.Connection.State != "connected" || st.Connection.Server != url {
			return fmt.Errorf("the installed agent never linked: %s", out)
		}
		return nil
	})
	token, rc := run(t, "relay", "token", "create", "--name", "svc", "--state-dir", relayState)
	if rc != 0 {
		t.Fatal("token create failed")
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "install-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp/svc", HTTPClient: relaytest.HTTPClient(strings.TrimSpace(token))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "process.start", Arguments: map[string]any{"command": "echo via-relay", "wait_ms": 10000}})
	if err != nil || res.IsError {
		t.Fatalf("process.start through the relay: %v %+v", err, res)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var started struct {
		FailureDomain string `json:"failure_domain"`
		State         string `json:"state"`
	}
	json.Unmarshal(raw, &started)
	// An installed agent runs jobs under the user manager, never beside it.
	if started.FailureDomain != "systemd_unit" || started.State != "exited" {
		t.Fatalf("job through the installed agent: %s", raw)
	}
}
