package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// relayEnv is a relay and an enrolled agent on loopback, each with its own
// directories, as `make run` sets them up.
type relayEnv struct {
	t            *testing.T
	url          string
	relayState   string
	agentState   string
	agentConfig  string
	relay, agent *exec.Cmd
	// token is the client token onlineDevice made.
	token string
	// database, when set, is the PostgreSQL state every relay command
	// of this environment uses.
	database string
	// agentLog, when set, gets the agent's standard error (else ours).
	agentLog io.Writer
	// agentExe, when set, is the binary the agent runs (else bin), and
	// agentEnv is added to its environment.
	agentExe string
	agentEnv []string
}

// startRelay runs `commandcore relay serve` on a free loopback port.
func startRelay(t *testing.T) *relayEnv {
	t.Helper()
	e := &relayEnv{t: t, relayState: t.TempDir(), agentState: t.TempDir(), agentConfig: t.TempDir()}
	e.relay = e.serve("127.0.0.1:0")
	return e
}

// serve runs the relay on listen and returns its process.
func (e *relayEnv) serve(listen string, extra ...string) *exec.Cmd {
	t := e.t
	t.Helper()
	cmd, url, err := relaytest.Serve(bin, append([]string{"--listen", listen, "--state-dir", e.relayState, "--config-dir", t.TempDir()}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	e.url = url
	return cmd
}

// relayCmd runs a relay administration command on the relay's state.
func (e *relayEnv) relayCmd(args ...string) string {
	e.t.Helper()
	args = append(append([]string{"relay"}, args...), "--state-dir", e.relayState)
	if e.database != "" {
		args = append(args, "--database", e.database)
	}
	out, errOut, code := run(e.t, args...)
	if code != 0 {
		e.t.Fatalf("%v: exit %d: %s", args, code, errOut)
	}
	return strings.TrimSpace(out)
}

// enrollAgent enrolls a device named name and starts its agent.
func (e *relayEnv) enrollAgent(name string) {
	e.t.Helper()
	code := e.relayCmd("enroll-code", "--name", name)
	if _, errOut, rc := run(e.t, "enroll", "--server", e.url, "--code", code, "--state-dir", e.agentState, "--config-dir", e.agentConfig); rc != 0 {
		e.t.Fatalf("enroll: exit %d: %s", rc, errOut)
	}
	// A code works once.
	if _, _, rc := run(e.t, "enroll", "--server", e.url, "--code", code, "--force", "--state-dir", e.t.TempDir(), "--config-dir", e.t.TempDir()); rc == 0 {
		e.t.Fatal("an enrollment code worked twice")
	}
	e.startAgent()
}

func (e *relayEnv) startAgent() {
	e.t.Helper()
	exe := bin
	if e.agentExe != "" {
		exe = e.agentExe
	}
	e.agent = exec.Command(exe, "agent", "--state-dir", e.agentState, "--config-dir", e.agentConfig)
	e.agent.Env = append(os.Environ(), e.agentEnv...)
	e.agent.Stderr = os.Stderr
	if e.agentLog != nil {
		e.agent.Stderr = e.agentLog
	}
	if err := e.agent.Start(); err != nil {
		e.t.Fatal(err)
	}
	a := e.agent
	e.t.Cleanup(func() { a.Process.Kill(); a.Wait() })
}

// newToken creates a client token with the given scope.
func (e *relayEnv) newToken(devices, tools string) (secret, id string) {
	e.t.Helper()
	secret = e.relayCmd("token", "create", "--name", "e2e", "--devices", devices, "--tools", tools)
	var toks []struct{ ID string }
	for _, line := range strings.Split(e.relayCmd("token", "list", "--json"), "\n") {
		var tok struct{ ID string }
		json.Unmarshal([]byte(line), &tok)
		toks = append(toks, tok)
	}
	// Newest first.
	return secret, toks[0].ID
}

// connect opens an MCP session to the relay's endpoint path with token;
// progress notifications go to onProgress.
func (e *relayEnv) connect(path, token string, onProgress func(*mcp.ProgressNotificationParams)) (*client, error) {
	opts := &mcp.ClientOptions{}
	if onProgress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { onProgress(r.Params) }
	}
	k, err := testkit.Dial(e.t, "e2e-remote", testkit.Relayed(e.url+path, token), opts)
	if err != nil {
		return nil, err
	}
	return &client{t: e.t, session: k.Session, kit: k}, nil
}

// onlineDevice starts a relay and an agent enrolled as dev1, and returns
// them with a client on /mcp/dev1 (token for every tool) once calls reach
// the device.
func onlineDevice(t *testing.T) (*relayEnv, *client) {
	t.Helper()
	e := startRelay(t)
	return e, e.online()
}

// online enrolls an agent as dev1 on e's relay and returns a client on
// /mcp/dev1 (token for every tool, kept in e.token) once calls reach it.
func (e *relayEnv) online() *client {
	t := e.t
	t.Helper()
	e.enrollAgent("dev1")
	token, _ := e.newToken("dev1", "*")
	c, err := e.connect("/mcp/dev1", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitOnline(t, c, nil)
	e.token = token
	return c
}

// waitOnline waits until calls through c reach the device.
func waitOnline(t *testing.T, c *client, args map[string]any) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, func() error {
		raw, isErr := c.call("process.jobs", args)
		if !isErr {
			return nil
		}
		if !strings.Contains(string(raw), "device_offline") {
			t.Fatalf("device never came online: %s", raw)
		}
		return fmt.Errorf("device never came online: %s", raw)
	})
}

// TestRelayEndToEnd: an ordinary MCP client reaches an enrolled agent's
// tools through the relay, with live output, while the job outlives the
// agent process; revocation and the owner's ceiling refuse the next call.
func TestRelayEndToEnd(t *testing.T) {
	e := startRelay(t)
	e.enrollAgent("dev1")
	token, tokenID := e.newToken("dev1", "*")
	c, err := e.connect("/mcp/dev1", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitOnline(t, c, nil)

	// A managed job through the relay.
	started := c.start(map[string]any{"command": "echo relay-out; exec sleep 120"})
	waitOutput(t, c, started.ProcessID, "relay-out")

	// The job outlives the agent; a restarted agent links again and
	// still manages it.
	e.agent.Process.Signal(syscall.SIGKILL)
	e.agent.Wait()
	if code, _ := c.fail("process.status", map[string]any{"process_id": started.ProcessID}); code != "device_offline" {
		t.Fatalf("with the agent gone: %s", code)
	}
	e.startAgent()
	waitOnline(t, c, nil)
	if r := c.status(started.ProcessID); r.State != "running" {
		t.Fatalf("after the agent's restart the job is %s", r.State)
	}
	c.stopAndWait(started.ProcessID)

	// Live output of process.run arrives through the relay as progress.
	var mu sync.Mutex
	var live strings.Builder
	pc, err := e.connect("/mcp/dev1", token, func(p *mcp.ProgressNotificationParams) {
		mu.Lock()
		live.WriteString(p.Message)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	params := &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{"command": "for i in 1 2 3; do echo live $i; done"}}
	params.SetProgressToken("client-tok")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := pc.session.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("process.run through the relay: %v %+v", err, res)
	}
	want := "live 1\nlive 2\nlive 3\n"
	testkit.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		got := live.String()
		mu.Unlock()
		if got != want {
			return fmt.Errorf("live output through the relay: %q", got)
		}
		return nil
	})

	// The multi-device endpoint lists the device and takes a device argument.
	m, err := e.connect("/mcp", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	var devs struct {
		Devices []struct {
			Name      string `json:"name"`
			Connected bool   `json:"connected"`
		} `json:"devices"`
	}
	m.ok("devices.list", nil, &devs)
	if len(devs.Devices) != 1 || devs.Devices[0].Name != "dev1" || !devs.Devices[0].Connected {
		t.Fatalf("devices.list: %+v", devs)
	}
	var jobsOut struct{ Jobs []json.RawMessage }
	m.ok("process.jobs", map[string]any{"device": "dev1"}, &jobsOut)
	if len(jobsOut.Jobs) == 0 {
		t.Fatal("process.jobs through /mcp lists nothing")
	}
	if code, _ := m.fail("process.jobs", map[string]any{}); code != "invalid_argument" {
		t.Fatalf("a call without device: %s", code)
	}
	if code, _ := m.fail("process.jobs", map[string]any{"device": "nope"}); code != "not_found" {
		t.Fatalf("a call for an unknown device: %s", code)
	}

	// The owner's ceiling applies after the grant.
	ceiling := filepath.Join(e.agentConfig, "permissions.json")
	if err := os.WriteFile(ceiling, []byte(`{"schema_version":1,"tools":["system.metrics"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _ := c.fail("process.jobs", nil); code != "permission_denied" {
		t.Fatalf("a tool outside the owner's ceiling: %s", code)
	}
	c.ok("system.metrics", nil, nil)
	os.Remove(ceiling)

	// Revocation takes effect on the next request, in an open session.
	e.relayCmd("token", "revoke", tokenID)
	if _, err := c.session.CallTool(ctx, &mcp.CallToolParams{Name: "process.jobs"}); err == nil {
		t.Fatal("a revoked token still reaches the device")
	}

	// The agent journals each link's end once, naming its kind.
	e.agent.Process.Signal(syscall.SIGTERM)
	e.agent.Wait()
	out, _, _ := run(t, "activity", "--last", "200", "--json", "--state-dir", e.agentState)
	if !strings.Contains(out, `"kind":"link_up"`) || !strings.Contains(out, `"kind":"link_end","tool":"","job_id":"","phase":"","outcome":"ok","duration_ms":`) ||
		!strings.Contains(out, `"reason":"local_shutdown"`) {
		t.Fatalf("no link end in the journal:\n%s", out)
	}
}

// TestRelayTokenScope: a token reaches only its devices and tools.
func TestRelayTokenScope(t *testing.T) {
	e := startRelay(t)
	e.enrollAgent("dev1")
	token, _ := e.newToken("dev1", "system.*")
	c, err := e.connect("/mcp/dev1", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.session.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != 1 || list.Tools[0].Name != "system.metrics" {
		t.Fatalf("a system.* token sees %d tools", len(list.Tools))
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		raw, isErr := c.call("system.metrics", nil)
		if !isErr {
			return nil
		}
		if !strings.Contains(string(raw), "device_offline") {
			t.Fatalf("system.metrics: %s", raw)
		}
		return fmt.Errorf("system.metrics: %s", raw)
	})
	other, _ := e.newToken("dev2", "*")
	if _, err := e.connect("/mcp/dev1", other, nil); err == nil {
		t.Fatal("a token for dev2 opened a session to dev1")
	}
	if _, err := e.connect("/mcp/dev1", "cct_bogus", nil); err == nil {
		t.Fatal("a bogus token opened a session")
	}
}

// TestLinkLossCancelsForegroundNotJobs: when the relay dies, the agent's
// foreground command is stopped and the link's end journalled, while a
// managed job runs on; the agent links again once the relay is back.
func TestLinkLossCancelsForegroundNotJobs(t *testing.T) {
	e, c := onlineDevice(t)
	job := c.start(map[string]any{"command": "exec sleep 120"})
	marker := "27.1828"
	go c.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{"command": "sleep " + marker}})
	pid := waitSleep(t, marker)

	e.relay.Process.Signal(syscall.SIGKILL)
	e.relay.Wait()
	lost := time.Now()
	for processExists(pid) {
		// The command itself would run for half a minute.
		if time.Since(lost) > 15*time.Second {
			t.Fatal("the foreground command outlived the link")
		}
		time.Sleep(20 * time.Millisecond)
	}
	addr := strings.TrimPrefix(e.url, "http://")
	e.relay = e.serve(addr)
	c, err := e.connect("/mcp/dev1", e.token, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitOnline(t, c, nil)
	if r := c.status(job.ProcessID); r.State != "running" {
		t.Fatalf("the managed job did not survive the link's loss: %s", r.State)
	}
	c.stopAndWait(job.ProcessID)
	out, _, _ := run(t, "activity", "--last", "200", "--json", "--state-dir", e.agentState)
	if !strings.Contains(out, `"reason":"remote_close"`) {
		t.Fatalf("the link's loss is not journalled:\n%s", out)
	}
	if strings.Contains(out, marker) {
		t.Fatal("the journal holds a command's argument")
	}
	st, _ := statusOf(t, e.agentState)
	if st.Connection.State != "connected" {
		t.Fatalf("status after relinking: %+v", st.Connection)
	}
}

// TestRelayAndEnrollRefuseBadInput: clear errors and exit codes, nothing
// stored, no secret echoed.
func TestRelayAndEnrollRefuseBadInput(t *testing.T) {
	e := startRelay(t)
	cfg := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"enroll", "--code", "x"}, 2, "--server"},
		{[]string{"enroll", "--server", "http://example.com", "--code", "x"}, 2, "loopback"},
		{[]string{"enroll", "--server", e.url, "--code", "ccE-WRONGWRONGWRONGWRONG"}, 1, "invalid, expired or used"},
		{[]string{"relay", "token", "create", "--name", "n", "--tools", "process.**"}, 2, "--tools"},
		{[]string{"relay", "token", "create", "--name", "n", "--ttl", "soon"}, 2, "--ttl"},
		{[]string{"relay", "token", "revoke", "tok_000000000000"}, 1, "no such client token"},
		{[]string{"relay", "enroll-code", "--ttl", "0d"}, 2, "--ttl"},
		{[]string{"relay", "serve", "--tls-cert", "c.pem"}, 2, "--tls-key"},
		{[]string{"agent", "--server", "http://example.com"}, 2, "loopback"},
	} {
		_, errOut, code := run(t, append(c.args, "--state-dir", e.relayState, "--config-dir", cfg)...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("%v: exit %d, %q", c.args, code, errOut)
		}
		if strings.Contains(errOut, "WRONGWRONG") {
			t.Errorf("%v: the code is echoed", c.args)
		}
	}
	if _, err := os.Stat(filepath.Join(cfg, "identity.json")); err == nil {
		t.Fatal("a refused enrollment stored an identity")
	}

	// A second enrollment does not silently replace the first.
	e.agentConfig = cfg
	code := e.relayCmd("enroll-code")
	if _, errOut, rc := run(t, "enroll", "--server", e.url, "--code", code, "--name", "first", "--state-dir", e.agentState, "--config-dir", cfg); rc != 0 {
		t.Fatalf("enroll: %s", errOut)
	}
	before, _ := os.ReadFile(filepath.Join(cfg, "identity.json"))
	code = e.relayCmd("enroll-code")
	if _, errOut, rc := run(t, "enroll", "--server", e.url, "--code", code, "--state-dir", e.agentState, "--config-dir", cfg); rc != 1 || !strings.Contains(errOut, "already enrolled as first") {
		t.Fatalf("second enroll: exit %d %q", rc, errOut)
	}
	if after, _ := os.ReadFile(filepath.Join(cfg, "identity.json")); string(after) != string(before) {
		t.Fatal("a refused enrollment changed the identity")
	}
	if out := e.relayCmd("devices"); !strings.Contains(out, "first") || !strings.Contains(out, "never") {
		t.Fatalf("relay devices:\n%s", out)
	}

	// An identity others can read is refused, not used.
	os.Chmod(filepath.Join(cfg, "identity.json"), 0o644)
	_, errOut, rc := run(t, "agent", "--state-dir", e.agentState, "--config-dir", cfg)
	if rc != 1 || !strings.Contains(errOut, "other users") {
		t.Fatalf("agent with a shared identity: exit %d %q", rc, errOut)
	}
}

// TestRelayOverTLS: with a certificate the relay serves HTTPS, and an
// agent that trusts it (SSL_CERT_FILE) enrolls and links over wss://.
func TestRelayOverTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	testkit.WriteSelfSigned(t, certFile, keyFile)
	e := &relayEnv{t: t, relayState: t.TempDir(), agentState: t.TempDir(), agentConfig: t.TempDir()}
	e.serve("127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)
	url := e.url
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("relay over TLS announced %q", url)
	}
	trust := append(os.Environ(), "SSL_CERT_FILE="+certFile)
	code := e.relayCmd("enroll-code", "--name", "tls-dev")
	enroll := exec.Command(bin, "enroll", "--server", url, "--code", code, "--state-dir", e.agentState, "--config-dir", e.agentConfig)
	enroll.Env = trust
	if b, err := enroll.CombinedOutput(); err != nil {
		t.Fatalf("enroll over TLS: %v\n%s", err, b)
	}
	agent := exec.Command(bin, "agent", "--state-dir", e.agentState, "--config-dir", e.agentConfig)
	agent.Env = trust
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	testkit.Eventually(t, 20*time.Second, func() error {
		if out := e.relayCmd("devices", "--json"); !strings.Contains(out, `"connected":true`) {
			return fmt.Errorf("the agent never linked over wss://: relay devices: %s", out)
		}
		return nil
	})
}

// TestRunningAgentPicksUpEnrollment: an agent started before enrollment
// reports not_enrolled, then links without a restart once enrolled.
func TestRunningAgentPicksUpEnrollment(t *testing.T) {
	e := startRelay(t)
	agent := exec.Command(bin, "agent", "--state-dir", e.agentState, "--config-dir", e.agentConfig, "--reconcile-every", "100ms")
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	testkit.Eventually(t, 10*time.Second, func() error {
		st, code := statusOf(t, e.agentState)
		if code != 0 {
			return fmt.Errorf("the agent never came up: status exit %d", code)
		}
		if st.Connection.State != "not_enrolled" {
			t.Fatalf("before enrollment: %+v", st.Connection)
		}
		return nil
	})
	code := e.relayCmd("enroll-code", "--name", "late")
	if _, errOut, rc := run(t, "enroll", "--server", e.url, "--code", code, "--state-dir", e.agentState, "--config-dir", e.agentConfig); rc != 0 {
		t.Fatalf("enroll: %s", errOut)
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		if st, _ := statusOf(t, e.agentState); st.Connection.State != "connected" {
			return fmt.Errorf("the running agent never linked: %+v", st.Connection)
		}
		return nil
	})
	out, _, _ := run(t, "status", "--state-dir", e.agentState)
	if !strings.Contains(out, "connected to "+e.url) {
		t.Fatalf("status:\n%s", out)
	}
	if devs := e.relayCmd("devices", "--json"); !strings.Contains(devs, `"name":"late"`) || !strings.Contains(devs, `"connected":true`) {
		t.Fatalf("relay devices: %s", devs)
	}
}

// TestRefusedDeviceCredentials: an agent whose device token the relay
// does not know keeps running jobs locally, reports disconnected, and
// journals the authentication failure once, not once per retry.
func TestRefusedDeviceCredentials(t *testing.T) {
	e := startRelay(t)
	code := e.relayCmd("enroll-code", "--name", "dev1")
	if _, errOut, rc := run(t, "enroll", "--server", e.url, "--code", code, "--state-dir", e.agentState, "--config-dir", e.agentConfig); rc != 0 {
		t.Fatalf("enroll: %s", errOut)
	}
	path := filepath.Join(e.agentConfig, "identity.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var id map[string]any
	json.Unmarshal(data, &id)
	id["token"] = "ccd_not-a-token-the-relay-issued"
	data, _ = json.Marshal(id)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	e.startAgent()
	testkit.Eventually(t, 20*time.Second, func() error {
		out, _, _ := run(t, "activity", "--last", "50", "--json", "--state-dir", e.agentState)
		if !strings.Contains(out, `"reason":"authentication_failure"`) {
			return fmt.Errorf("no authentication failure journalled:\n%s", out)
		}
		if strings.Count(out, `"kind":"link_end"`) != 1 || strings.Contains(out, "not-a-token") {
			t.Fatalf("journal:\n%s", out)
		}
		return nil
	})
	testkit.Eventually(t, 10*time.Second, func() error {
		if st, rc := statusOf(t, e.agentState); rc != 0 || st.Connection.State != "disconnected" {
			return fmt.Errorf("status: exit %d %+v", rc, st.Connection)
		}
		return nil
	})
	c := newClient(t, e.agentState, nil)
	c.start(map[string]any{"command": "true", "wait_ms": 5000})
}

// TestRelayCancelStopsTheCommand: a client that cancels its process.run
// through the relay stops the command on the device.
func TestRelayCancelStopsTheCommand(t *testing.T) {
	_, c := onlineDevice(t)
	cancelStopsTheCommand(t, c, "23.4567")
	// The device is still usable afterwards.
	c.ok("process.jobs", nil, nil)
}

// cancelStopsTheCommand cancels a process.run of `sleep marker` through
// c once the command runs, and checks that the call ends without a result
// and the command with it.
func cancelStopsTheCommand(t *testing.T, c *client, marker string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.session.CallTool(ctx, &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{"command": "sleep " + marker}})
		done <- err
	}()
	pid := waitSleep(t, marker)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled call returned a result")
	}
	// The command itself would run for over twenty seconds.
	testkit.Eventually(t, 15*time.Second, func() error {
		if processExists(pid) {
			return fmt.Errorf("the command (pid %d) outlived its cancelled call", pid)
		}
		return nil
	})
}

// TestRelayLargeResults: a 1 MiB-per-stream output page crosses the link;
// one whose JSON would outgrow a frame (text that escapes to six bytes a
// byte) is answered with result_too_large, and the link stays up.
func TestRelayLargeResults(t *testing.T) {
	_, c := onlineDevice(t)
	page := func(command string) (json.RawMessage, bool) {
		job := c.start(map[string]any{"command": command, "wait_ms": 20000})
		return c.call("process.output", map[string]any{"process_id": job.ProcessID, "max_bytes": 1 << 20})
	}
	raw, isErr := page("head -c 1048576 /dev/urandom; head -c 1048576 /dev/urandom >&2")
	if isErr {
		t.Fatalf("a 1 MiB binary page through the relay: %s", raw)
	}
	var out struct {
		Stdout, Stderr struct {
			Encoding   string `json:"encoding"`
			NextOffset int64  `json:"next_offset"`
		}
	}
	json.Unmarshal(raw, &out)
	if out.Stdout.Encoding != "base64" || out.Stdout.NextOffset != 1<<20 || out.Stderr.NextOffset != 1<<20 {
		t.Fatalf("binary page: %+v", out)
	}
	raw, isErr = page(`head -c 1048576 /dev/zero | tr '\0' '\1'; head -c 1048576 /dev/zero | tr '\0' '\1' >&2`)
	if !isErr || !strings.Contains(string(raw), "result_too_large") {
		t.Fatalf("an escape-heavy 1 MiB page: %.300s", raw)
	}
	c.ok("process.jobs", nil, nil)
}

// TestRelayLongPollAndConcurrency: process.output's long poll waits
// through the relay for output that comes later, while other calls on the
// same device proceed alongside it.
func TestRelayLongPollAndConcurrency(t *testing.T) {
	_, c := onlineDevice(t)
	job := c.start(map[string]any{"command": "sleep 2; echo late"})
	// Calls from other goroutines go to the session directly: only the
	// test's own goroutine may fail the test.
	call := func(tool string, args any) (json.RawMessage, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := c.session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			return nil, err
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if res.IsError {
			return raw, fmt.Errorf("%s failed: %s", tool, raw)
		}
		return raw, nil
	}
	polled := make(chan json.RawMessage, 1)
	go func() {
		raw, err := call("process.output", map[string]any{"process_id": job.ProcessID, "wait_ms": 20000})
		if err != nil {
			raw = json.RawMessage(strconv.Quote(err.Error()))
		}
		polled <- raw
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := call("system.metrics", nil); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a concurrent call failed: %v", err)
	}
	select {
	case raw := <-polled:
		var out struct{ Stdout struct{ Data string } }
		json.Unmarshal(raw, &out)
		if out.Stdout.Data != "late\n" {
			t.Fatalf("the long poll returned %s", raw)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the long poll never returned")
	}
}

// TestRelayRoutesByDevice: on /mcp, the device argument picks the device;
// each job lands on its own device, and a token for one device sees and
// reaches only that one.
func TestRelayRoutesByDevice(t *testing.T) {
	e := startRelay(t)
	e.enrollAgent("dev1")
	second := &relayEnv{t: t, url: e.url, relayState: e.relayState, agentState: t.TempDir(), agentConfig: t.TempDir()}
	second.enrollAgent("dev2")
	all, _ := e.newToken("*", "*")
	c, err := e.connect("/mcp", all, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{"dev1", "dev2"} {
		waitOnline(t, c, map[string]any{"device": dev})
	}
	var devs struct{ Devices []struct{ Name string } }
	c.ok("devices.list", nil, &devs)
	if len(devs.Devices) != 2 {
		t.Fatalf("devices.list: %+v", devs)
	}
	var started struct {
		ProcessID string `json:"process_id"`
	}
	c.ok("process.start", map[string]any{"device": "dev2", "command": "true"}, &started)
	jobsOn := func(dev string) string {
		raw, isErr := c.call("process.jobs", map[string]any{"device": dev})
		if isErr {
			t.Fatalf("process.jobs on %s: %s", dev, raw)
		}
		return string(raw)
	}
	if !strings.Contains(jobsOn("dev2"), started.ProcessID) || strings.Contains(jobsOn("dev1"), started.ProcessID) {
		t.Fatal("the job did not land on the device the call named")
	}
	one, _ := e.newToken("dev2", "*")
	c2, err := e.connect("/mcp", one, nil)
	if err != nil {
		t.Fatal(err)
	}
	c2.ok("devices.list", nil, &devs)
	if len(devs.Devices) != 1 || devs.Devices[0].Name != "dev2" {
		t.Fatalf("devices.list for a dev2 token: %+v", devs)
	}
	if code, _ := c2.fail("process.jobs", map[string]any{"device": "dev1"}); code != "not_found" {
		t.Fatalf("a dev2 token reaching dev1: %s", code)
	}
}
