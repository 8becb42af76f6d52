package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/commandcore/commandcore/internal/natstest"
	"github.com/commandcore/commandcore/internal/pgtest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// clusterEnv is relay replicas (real binaries) on one real PostgreSQL
// database, joined through a real NATS server, and an agent enrolled at
// one of them.
type clusterEnv struct {
	*relayEnv
	urls     []string
	replicas []*exec.Cmd
	nats     string
	// pg and ns are the engines, for tests that restart them.
	pg *pgtest.Cluster
	ns *natsserver.Server
}

// startCluster starts n replicas and an agent enrolled as dev1 at replica
// holder, and returns them once calls through every replica reach it.
func startCluster(t *testing.T, n, holder int) (*clusterEnv, []*client) {
	t.Helper()
	ns := natstest.Start(t)
	return startClusterOn(t, n, holder, ns, func(int) []string { return []string{"--nats", ns.ClientURL()} })
}

// startClusterOn is startCluster on the NATS server ns, replica i joining
// it with the flags natsFlags(i).
func startClusterOn(t *testing.T, n, holder int, ns *natsserver.Server, natsFlags func(i int) []string) (*clusterEnv, []*client) {
	t.Helper()
	pg := pgtest.StartT(t)
	db, err := pg.CreateDatabase("relay")
	if err != nil {
		t.Fatal(err)
	}
	e := &clusterEnv{relayEnv: &relayEnv{t: t, relayState: t.TempDir(), agentState: t.TempDir(), agentConfig: t.TempDir(), database: db},
		nats: ns.ClientURL(), pg: pg, ns: ns}
	for i := range n {
		e.replicas = append(e.replicas, e.serve("127.0.0.1:0", append(append([]string{"--database", db}, natsFlags(i)...), "--name", fmt.Sprintf("r%d", i))...))
		e.urls = append(e.urls, e.url)
	}
	// Enrolled with every replica, the holder first: it links there.
	order := append([]string{e.urls[holder]}, append(append([]string{}, e.urls[:holder]...), e.urls[holder+1:]...)...)
	e.url = strings.Join(order, ",")
	e.enrollAgent("dev1")
	token, _ := e.newToken("dev1", "*")
	e.token = token
	var clients []*client
	for _, u := range e.urls {
		e.url = u
		c, err := e.connect("/mcp/dev1", token, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitOnline(t, c, nil)
		clients = append(clients, c)
	}
	e.url = e.urls[holder]
	return e, clients
}

// TestClusterCallsCrossReplicas: with the device linked to replica 1, a
// client of replica 0 gets the same answers byte for byte as one of
// replica 1: a job started, its output long-polled, process.run with its
// live output in order, a cancellation that stops the command, and a
// result too large for the link.
func TestClusterCallsCrossReplicas(t *testing.T) {
	e, cs := startCluster(t, 2, 1)
	crossReplicaCalls(t, e, cs)
}

// TestClusterOverSecuredNATS: the same calls cross replicas joined
// through a NATS server that takes only TLS, one replica signing in with
// a user and password, the other with an NKey.
func TestClusterOverSecuredNATS(t *testing.T) {
	ns := natstest.StartSecured(t)
	e, cs := startClusterOn(t, 2, 1, ns.Server, func(i int) []string {
		if i == 0 {
			return []string{"--nats", strings.Replace(ns.URL, "tls://", "tls://"+ns.User+":"+ns.Password+"@", 1), "--nats-ca", ns.CA}
		}
		return []string{"--nats", ns.URL, "--nats-nkey", ns.NKeySeed, "--nats-ca", ns.CA}
	})
	crossReplicaCalls(t, e, cs)
}

// crossReplicaCalls checks the calls of TestClusterCallsCrossReplicas on
// a cluster of two whose holder is replica 1.
func crossReplicaCalls(t *testing.T, e *clusterEnv, cs []*client) {
	t.Helper()
	far, near := cs[0], cs[1]
	replicas := e.relayCmd("replicas", "--json")
	if strings.Count(replicas, `"nats":true`) != 2 || !strings.Contains(replicas, `"links":1`) {
		t.Fatalf("relay replicas:\n%s", replicas)
	}
	if devs := e.relayCmd("devices"); !strings.Contains(devs, "dev1") || !strings.Contains(devs, " r1 ") {
		t.Fatalf("relay devices does not name r1 as dev1's holder:\n%s", devs)
	}

	job := far.start(map[string]any{"command": "sleep 1; echo late"})
	var polled json.RawMessage
	polled, isErr := far.call("process.output", map[string]any{"process_id": job.ProcessID, "wait_ms": 20000})
	if isErr || !bytes.Contains(polled, []byte(`"data":"late\n"`)) {
		t.Fatalf("a long poll through the far replica: %s", polled)
	}
	far.waitTerminal(job.ProcessID, 20*time.Second)
	page := map[string]any{"process_id": job.ProcessID}
	a, _ := far.call("process.output", page)
	b, _ := near.call("process.output", page)
	if !bytes.Equal(a, b) {
		t.Fatalf("one page, two answers:\nfar  %s\nnear %s", a, b)
	}

	var mu sync.Mutex
	var live []string
	e.url = e.urls[0]
	streaming, err := e.connect("/mcp/dev1", e.token, func(p *mcp.ProgressNotificationParams) {
		mu.Lock()
		live = append(live, p.Message)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	params := &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{"command": "for i in $(seq 1 40); do echo line$i; sleep 0.01; done"}}
	params.SetProgressToken("live")
	res, err := streaming.session.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("process.run through the far replica: %v %+v", err, res)
	}
	mu.Lock()
	got := strings.Join(live, "")
	mu.Unlock()
	var want strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&want, "line%d\n", i)
	}
	if got != want.String() {
		t.Fatalf("live output through the far replica, in order:\n%q\nwant\n%q", got, want.String())
	}

	cancelStopsTheCommand(t, far, "31.4159")

	big := far.start(map[string]any{"command": `head -c 1048576 /dev/zero | tr '\0' '\1'; head -c 1048576 /dev/zero | tr '\0' '\1' >&2`, "wait_ms": 20000})
	tooLarge := map[string]any{"process_id": big.ProcessID, "max_bytes": 1 << 20}
	a, isErr = far.call("process.output", tooLarge)
	b, _ = near.call("process.output", tooLarge)
	if !isErr || !strings.Contains(string(a), "result_too_large") || !bytes.Equal(a, b) {
		t.Fatalf("result_too_large through the far replica:\nfar  %.300s\nnear %.300s", a, b)
	}
	far.ok("process.jobs", nil, nil)
}

// TestClusterRevocationReachesEveryReplica: a token revoked through the
// database is refused by every replica on its next call, round after
// round.
func TestClusterRevocationReachesEveryReplica(t *testing.T) {
	e, _ := startCluster(t, 2, 1)
	for round := range 10 {
		token, id := e.newToken("dev1", "*")
		var cs []*client
		for _, u := range e.urls {
			e.url = u
			c, err := e.connect("/mcp/dev1", token, nil)
			if err != nil {
				t.Fatal(err)
			}
			c.ok("process.jobs", nil, nil)
			cs = append(cs, c)
		}
		e.relayCmd("token", "revoke", id)
		for i, c := range cs {
			res, err := c.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.jobs", Arguments: map[string]any{}})
			if err == nil && !res.IsError {
				t.Fatalf("round %d: replica %d served a revoked token", round, i)
			}
		}
	}
}

// TestClusterRefusesALoneReplica: beside live replicas joined through
// NATS, a replica started without --nats refuses to start and says why;
// so does one given a NATS server nobody runs.
func TestClusterRefusesALoneReplica(t *testing.T) {
	e, _ := startCluster(t, 1, 0)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "start every replica with --nats"},
		{[]string{"--nats", "nats://127.0.0.1:1"}, "cannot reach NATS at --nats"},
		{[]string{"--nats", "nats://relay:pw@nats.example.invalid:4222"}, "off loopback without TLS"},
	} {
		args := append([]string{"relay", "serve", "--listen", "127.0.0.1:0", "--database", e.database, "--state-dir", t.TempDir()}, tc.args...)
		_, errOut, code := run(t, args...)
		if code == 0 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, ":pw@") {
			t.Errorf("relay serve %v: exit %d, %q; want one line saying %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestClusterNATSIsNoTrustBoundary: a client of the NATS server beside
// the replicas, without the cluster key, reads every subject while a call
// crosses: it sees neither the command nor its output. While another call
// runs it publishes, on every inbox the server's monitoring lists, an
// answer shaped as the replicas' earlier unsealed protocol, an empty
// message and noise: the call is not cancelled and its answer is the
// device's.
func TestClusterNATSIsNoTrustBoundary(t *testing.T) {
	e, cs := startCluster(t, 2, 1)
	far := cs[0]
	spy, err := nats.Connect(e.nats)
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	var mu sync.Mutex
	var seen [][]byte
	if _, err := spy.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		seen = append(seen, append(m.Data, []byte(fmt.Sprint(m.Header))...))
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	spy.Flush()
	const marker = "the-prod-password-0x5eed"
	if out, isErr := far.call("process.run", map[string]any{"command": "echo " + marker}); isErr || !bytes.Contains(out, []byte(marker)) {
		t.Fatalf("process.run through the far replica: %s", out)
	}
	mu.Lock()
	for _, b := range seen {
		if bytes.Contains(b, []byte(marker)) || bytes.Contains(b, []byte("process.run")) {
			t.Errorf("a NATS message carries the call in clear: %.200q", b)
		}
	}
	n := len(seen)
	mu.Unlock()
	if n == 0 {
		t.Fatal("the spy saw nothing: it is not where the replicas talk")
	}

	answer := make(chan string, 1)
	go func() {
		res, err := far.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.run",
			Arguments: map[string]any{"command": "sleep 2.345; echo slept-" + "well"}})
		raw, _ := json.Marshal(res)
		answer <- fmt.Sprint(string(raw), err)
	}()
	waitSleep(t, "2.345")
	cz, err := e.ns.Connz(&natsserver.ConnzOptions{Subscriptions: true})
	if err != nil {
		t.Fatal(err)
	}
	forged := 0
	for _, c := range cz.Conns {
		for _, sub := range c.Subs {
			if !strings.HasPrefix(sub, "_INBOX.") || strings.HasSuffix(sub, "*") {
				continue
			}
			m := nats.NewMsg(sub)
			m.Header.Set("Cc-Seq", "1")
			m.Header.Set("Cc-Kind", "result")
			m.Data = []byte(`{"content":[{"type":"text","text":"forged"}],"structuredContent":{"stdout":"forged"}}`)
			spy.PublishMsg(m)
			spy.Publish(sub, nil)
			spy.Publish(sub, bytes.Repeat([]byte{0xff}, 64))
			forged++
		}
	}
	spy.Flush()
	if forged < 2 {
		t.Fatalf("the monitoring listed %d inboxes, want the answer's and the cancellation's", forged)
	}
	if text := <-answer; !strings.Contains(text, "slept-well") {
		t.Fatalf("the answer through the far replica after forged messages: %q", text)
	}
}

// TestClusterSurvivesTheLossOfTheHolder: SIGKILL the replica holding the
// device's link; the call in flight through it ends unavailable, the agent
// links to another replica within seconds, and its jobs are untouched.
func TestClusterSurvivesTheLossOfTheHolder(t *testing.T) {
	e, cs := startCluster(t, 2, 1)
	far := cs[0]
	job := far.start(map[string]any{"command": "sleep 300"})
	before := far.status(job.ProcessID)
	inFlight := make(chan string, 1)
	go func() {
		res, err := far.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{"command": "sleep 27.1828"}})
		switch {
		case err != nil:
			inFlight <- err.Error()
		default:
			raw, _ := json.Marshal(res.StructuredContent)
			inFlight <- string(raw)
		}
	}()
	waitSleep(t, "27.1828")
	if err := e.replicas[1].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case answer := <-inFlight:
		if !strings.Contains(answer, `"code":"unavailable"`) {
			t.Fatalf("the call in flight through the killed replica answered %s, want unavailable", answer)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call in flight through the killed replica never ended")
	}
	relinked := time.Now()
	testkit.Eventually(t, 15*time.Second, func() error {
		raw, isErr := far.call("process.jobs", nil)
		if isErr {
			return fmt.Errorf("no call through the surviving replica yet: %s", raw)
		}
		return nil
	})
	t.Logf("relinked through the surviving replica %s after the in-flight call ended", time.Since(relinked).Round(time.Millisecond))
	after := far.status(job.ProcessID)
	if after.State != "running" || after.Identity == nil || before.Identity == nil || after.Identity.Supervisor != before.Identity.Supervisor {
		t.Fatalf("the job changed across the failover: %+v then %+v", before, after)
	}
	if devs := e.relayCmd("devices"); !strings.Contains(devs, " r0 ") {
		t.Fatalf("relay devices does not name r0 as the new holder:\n%s", devs)
	}
}

// TestRelayMigrateMovesAllToTheCluster: a single relay with a device, a
// client token and audit entries moves to PostgreSQL; two replicas on it
// take the same device's link and honour the same token, with the audit
// carried over.
func TestRelayMigrateMovesAllToTheCluster(t *testing.T) {
	e, c := onlineDevice(t)
	c.ok("process.jobs", nil, nil)
	e.relay.Process.Signal(syscall.SIGTERM)
	e.relay.Wait()
	pg := pgtest.StartT(t)
	db, err := pg.CreateDatabase("relay")
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "relay", "migrate", "--from-state-dir", e.relayState, "--database", db)
	if code != 0 || !strings.HasPrefix(out, "moved 1 devices, 1 client tokens") {
		t.Fatalf("relay migrate: exit %d, %q %q", code, out, errOut)
	}
	e.database = db
	if _, errOut, code := run(t, "relay", "migrate", "--from-state-dir", e.relayState, "--database", db); code == 0 || !strings.Contains(errOut, "already holds relay state") {
		t.Fatalf("a second migrate into the same database: exit %d, %q", code, errOut)
	}
	nats := natstest.Start(t).ClientURL()
	var urls []string
	for i := range 2 {
		e.serve("127.0.0.1:0", "--database", db, "--nats", nats, "--name", fmt.Sprintf("m%d", i))
		urls = append(urls, e.url)
	}
	// The agent still dials the old relay's address; point it at the
	// cluster as its owner would.
	e.agent.Process.Kill()
	e.agent.Wait()
	e.agent = exec.Command(bin, "agent", "--state-dir", e.agentState, "--config-dir", e.agentConfig, "--server", strings.Join(urls, ","))
	if err := e.agent.Start(); err != nil {
		t.Fatal(err)
	}
	a := e.agent
	t.Cleanup(func() { a.Process.Kill(); a.Wait() })
	for _, u := range urls {
		e.url = u
		moved, err := e.connect("/mcp/dev1", e.token, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitOnline(t, moved, nil)
	}
	if audit := e.relayCmd("audit", "--json"); !strings.Contains(audit, `"tool":"process.jobs"`) {
		t.Fatalf("the audit did not move:\n%s", audit)
	}
}

// TestClusterRidesOutItsEngines: while a client of the far replica calls
// in a loop, PostgreSQL restarts, then NATS: meanwhile calls fail only
// with unavailable, never with a wrong answer (a refused token, an unknown
// or offline device); afterwards they all succeed again; and every call
// that got an answer is in the audit.
func TestClusterRidesOutItsEngines(t *testing.T) {
	e, _ := startCluster(t, 2, 1)
	port := e.ns.Addr().(*net.TCPAddr).Port
	// The loop's calls alone carry this token: the audit must hold
	// exactly those that got an answer.
	token, tokenID := e.newToken("dev1", "process.jobs")
	e.url = e.urls[0]
	far, err := e.connect("/mcp/dev1", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n outcomes
	loop := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if err := n.call(far); err != nil {
				t.Fatal(err)
			}
		}
	}
	loop(300 * time.Millisecond)
	e.pg.StopServer()
	loop(time.Second)
	if err := e.pg.StartServer(); err != nil {
		t.Fatal(err)
	}
	loop(time.Second)
	e.ns.Shutdown()
	loop(time.Second)
	natstest.StartOn(t, port)
	// Full recovery: every call succeeds again.
	testkit.Eventually(t, 30*time.Second, func() error {
		before := n.ok
		for range 20 {
			if err := n.call(far); err != nil {
				t.Fatal(err)
			}
		}
		if n.ok-before != 20 {
			return fmt.Errorf("%d of 20 calls succeeded after both engines came back", n.ok-before)
		}
		return nil
	})
	t.Logf("%d calls answered (%d ok), %d unavailable", n.answered, n.ok, n.unavailable)
	if n.unavailable == 0 {
		t.Fatal("no call noticed either engine restarting: the test restarted nothing")
	}
	testkit.Eventually(t, 40*time.Second, func() error {
		got := strings.Count(e.relayCmd("audit", "--last", "100000", "--json"), `"token_id":"`+tokenID+`"`)
		if got != n.answered {
			return fmt.Errorf("the audit holds %d entries of the loop's token for %d answered calls", got, n.answered)
		}
		return nil
	})
}

// outcomes counts how calls ended: answered (a result, ok or a tool
// error), ok, and unavailable (as a tool error or an HTTP 503).
type outcomes struct{ answered, ok, unavailable int }

// call makes one process.jobs call through c and counts it; any end but
// success or unavailable is an error.
func (n *outcomes) call(c *client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.session.CallTool(ctx, &mcp.CallToolParams{Name: "process.jobs", Arguments: map[string]any{}})
	switch {
	case err != nil && strings.Contains(err.Error(), "Service Unavailable"):
		n.unavailable++
		return nil
	case err != nil:
		return fmt.Errorf("a call failed with %v, not unavailable", err)
	}
	n.answered++
	if !res.IsError {
		n.ok++
		return nil
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(raw), `"code":"unavailable"`) {
		return fmt.Errorf("a call failed with %s, not unavailable", raw)
	}
	n.unavailable++
	return nil
}

// TestClusterRedeemsACodeOnce: one enrollment code redeemed at the same
// moment through two replicas enrolls one device, round after round.
func TestClusterRedeemsACodeOnce(t *testing.T) {
	e, _ := startCluster(t, 2, 0)
	for round := range 5 {
		code := e.relayCmd("enroll-code", "--name", fmt.Sprintf("racer%d", round))
		codes := make(chan int, 2)
		for _, u := range e.urls {
			go func() {
				cmd := exec.Command(bin, "enroll", "--server", u, "--code", code, "--state-dir", t.TempDir(), "--config-dir", t.TempDir())
				if err := cmd.Run(); err != nil {
					codes <- 1
					return
				}
				codes <- 0
			}()
		}
		if a, b := <-codes, <-codes; a+b != 1 {
			t.Fatalf("round %d: %d of 2 enrollments with one code failed, want exactly 1", round, a+b)
		}
	}
	devs := e.relayCmd("devices", "--json")
	if n := strings.Count(devs, `"name":"racer`); n != 5 {
		t.Fatalf("%d racer devices, want 5:\n%s", n, devs)
	}
}

// TestClusterKeepsOneLinkPerDevice: a second agent with the device's
// identity dials another replica while the first agent's link answers: it
// is refused with device_busy, and the first link keeps serving.
func TestClusterKeepsOneLinkPerDevice(t *testing.T) {
	e, cs := startCluster(t, 2, 1)
	copyConfig := t.TempDir()
	data, err := os.ReadFile(filepath.Join(e.agentConfig, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copyConfig, "identity.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	copyState := t.TempDir()
	second := exec.Command(bin, "agent", "--state-dir", copyState, "--config-dir", copyConfig, "--server", e.urls[0])
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { second.Process.Kill(); second.Wait() })
	testkit.Eventually(t, 20*time.Second, func() error {
		out, _, _ := run(t, "activity", "--last", "50", "--json", "--state-dir", copyState)
		if !strings.Contains(out, `"device_busy"`) {
			return fmt.Errorf("the second agent's journal shows no device_busy refusal:\n%s", out)
		}
		return nil
	})
	for _, c := range cs {
		c.ok("process.jobs", nil, nil)
	}
	if devs := e.relayCmd("devices"); !strings.Contains(devs, " r1 ") {
		t.Fatalf("the first agent's link moved:\n%s", devs)
	}
}
