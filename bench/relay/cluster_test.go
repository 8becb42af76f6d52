package relaybench

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/natstest"
	"github.com/commandcore/commandcore/internal/pgtest"
	"github.com/commandcore/commandcore/internal/relaytest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// cluster is relay replicas on one PostgreSQL database (a throw-away
// cluster, pgtest) joined through NATS (the nats-server module, in this
// process), with the benchmark's agent enrolled at every one, replica 0
// first, and a `commandcore mcp` beside them.
type cluster struct {
	*env
	db, nats string
	urls     []string
	replicas []*exec.Cmd
	token    string
}

func setupCluster(b *testing.B, n int) *cluster {
	b.Helper()
	pg := pgtest.StartT(b)
	db, err := pg.CreateDatabase("relay")
	if err != nil {
		b.Fatal(err)
	}
	ns := natstest.Start(b)
	c := &cluster{env: &env{b: b, relayState: b.TempDir(), agentState: b.TempDir(), agentConfig: b.TempDir()}, db: db, nats: ns.ClientURL()}
	for i := range n {
		c.replicas = append(c.replicas, c.serveReplica(i, "127.0.0.1:0"))
	}
	code := c.relayDB("enroll-code", "--name", device)
	if _, err := command("enroll", "--server", strings.Join(c.urls, ","), "--code", code, "--state-dir", c.agentState, "--config-dir", c.agentConfig); err != nil {
		b.Fatalf("enroll: %v", err)
	}
	c.startAgent()
	c.token = c.relayDB("token", "create", "--name", "bench", "--devices", device, "--tools", "*")
	return c
}

// serveReplica starts replica i on listen and records its URL.
func (c *cluster) serveReplica(i int, listen string) *exec.Cmd {
	cmd, url, err := relaytest.Serve(ccBin, "--listen", listen, "--database", c.db, "--nats", c.nats, "--name", fmt.Sprintf("r%d", i),
		"--state-dir", c.b.TempDir(), "--config-dir", c.b.TempDir())
	if err != nil {
		c.b.Fatal(err)
	}
	c.b.Cleanup(func() { stop(cmd) })
	if i < len(c.urls) {
		c.urls[i] = url
	} else {
		c.urls = append(c.urls, url)
	}
	return cmd
}

// relayDB runs a relay administration command on the cluster's database.
func (c *cluster) relayDB(args ...string) string {
	c.b.Helper()
	out, err := command(append(append([]string{"relay"}, args...), "--database", c.db)...)
	if err != nil {
		c.b.Fatalf("relay %v: %v", args, err)
	}
	return strings.TrimSpace(out)
}

// side opens a session through replica i once calls through it reach the
// device.
func (c *cluster) side(i int, name string) *side {
	s := &side{name: name, state: c.agentState, live: &liveOutput{}}
	s.session = connect(c.b, s.live, testkit.Relayed(c.urls[i]+"/mcp/"+device, c.token))
	testkit.Eventually(c.b, 20*time.Second, func() error {
		_, err := s.call("process.jobs", nil, nil)
		return err
	})
	return s
}

// BenchmarkClusterLatency times process.jobs over stdio, through the
// replica holding the device's link (near) and through one that does not
// (far: the call crosses NATS to the holder and back), interleaved.
func BenchmarkClusterLatency(b *testing.B) {
	c := setupCluster(b, 2)
	near, far := c.side(0, "near"), c.side(1, "far")
	stdio := setupStdio(b)
	variants := []*side{stdio, near, far}
	names := []string{"stdio", "near", "far"}
	samples := interleave(b, names, func(j, _ int) (time.Duration, error) {
		return variants[j].call("process.jobs", nil, nil)
	})
	b.ReportMetric(0, "ns/op")
	p50 := map[string]time.Duration{}
	for j, name := range names {
		p50[name] = report(b, name, samples[j]).P50
	}
	b.ReportMetric(ms(p50["far"]-p50["near"]), "far-minus-near-p50-ms")
	b.ReportMetric(ms(p50["far"]-p50["stdio"]), "far-minus-stdio-p50-ms")
}

// BenchmarkClusterFailover SIGKILLs the replica holding the device's link
// and times, from the kill, the first call answered through another
// replica; the killed replica then starts again on its address, so the
// next round kills the other one.
func BenchmarkClusterFailover(b *testing.B) {
	c := setupCluster(b, 2)
	sides := []*side{c.side(0, "r0"), c.side(1, "r1")}
	var samples []time.Duration
	holder := 0
	for range b.N {
		if err := c.replicas[holder].Process.Kill(); err != nil {
			b.Fatal(err)
		}
		c.replicas[holder].Wait()
		killed := time.Now()
		other := 1 - holder
		if err := testkit.PollEvery(30*time.Second, time.Millisecond, func() error {
			_, err := sides[other].call("process.jobs", nil, nil)
			return err
		}); err != nil {
			b.Fatalf("no call answered through the other replica: %v", err)
		}
		samples = append(samples, time.Since(killed))
		addr := strings.TrimPrefix(c.urls[holder], "http://")
		c.replicas[holder] = c.serveReplica(holder, addr)
		sides[holder] = c.side(holder, sides[holder].name)
		holder = other
	}
	b.ReportMetric(0, "ns/op")
	report(b, "failover", samples)
}
