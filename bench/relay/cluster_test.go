package relaybench

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/bench/benchkit"
	"github.com/commandcore/commandcore/internal/natstest"
	"github.com/commandcore/commandcore/internal/pgtest"
	"github.com/commandcore/commandcore/internal/relay/relaytest"
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
	agent    *exec.Cmd
	token    string
}

// engines are a PostgreSQL server and a NATS server for clusters.
type engines struct {
	pg   *pgtest.Cluster
	nats string
	dbs  int
}

func startEngines(b *testing.B) *engines {
	return &engines{pg: pgtest.StartT(b), nats: natstest.Start(b).ClientURL()}
}

func setupCluster(b *testing.B, n int) *cluster { return startEngines(b).cluster(b, n) }

// cluster starts n replicas on a new database of the engines.
func (en *engines) cluster(b *testing.B, n int) *cluster {
	b.Helper()
	en.dbs++
	db, err := en.pg.CreateDatabase(fmt.Sprintf("relay%d", en.dbs))
	if err != nil {
		b.Fatal(err)
	}
	c := &cluster{env: &env{b: b, relayState: b.TempDir(), agentState: b.TempDir(), agentConfig: b.TempDir()}, db: db, nats: en.nats}
	for i := range n {
		c.replicas = append(c.replicas, c.serveReplica(i, "127.0.0.1:0"))
	}
	code := c.relayDB("enroll-code", "--name", device)
	if _, err := command("enroll", "--server", strings.Join(c.urls, ","), "--code", code, "--state-dir", c.agentState, "--config-dir", c.agentConfig); err != nil {
		b.Fatalf("enroll: %v", err)
	}
	c.agent = c.startAgent()
	c.token = c.relayDB("token", "create", "--name", "bench", "--devices", device, "--tools", "*")
	return c
}

// stop ends the cluster's agent and replicas.
func (c *cluster) stop() {
	stop(c.agent)
	for _, r := range c.replicas {
		stop(r)
	}
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

// BenchmarkClusterFailover: an agent linked to replica 0 of two, with
// its link up; SIGKILL replica 0 and time, from the kill, the first call
// answered through replica 1. Each round is a cluster of its own (a new
// database, replicas and agent on the same engines), so every kill meets
// an agent whose link was stable, as in production: an agent whose links
// keep ending at once backs off further each time.
func BenchmarkClusterFailover(b *testing.B) {
	en := startEngines(b)
	var samples []time.Duration
	for range b.N {
		c := en.cluster(b, 2)
		c.side(0, "holder")
		other := c.side(1, "other")
		if err := c.replicas[0].Process.Kill(); err != nil {
			b.Fatal(err)
		}
		c.replicas[0].Wait()
		killed := time.Now()
		if err := testkit.PollEvery(30*time.Second, time.Millisecond, func() error {
			_, err := other.call("process.jobs", nil, nil)
			return err
		}); err != nil {
			b.Fatalf("no call answered through the other replica: %v", err)
		}
		samples = append(samples, time.Since(killed))
		c.stop()
	}
	b.ReportMetric(0, "ns/op")
	report(b, "failover", samples)
}

// BenchmarkClusterCapacity: three replicas, each holding CLUSTER_LINKS
// idle links (default 10,000; linksim, one per replica, as in
// BenchmarkRelayCapacity), and the real agent's. Per replica it reports
// resident memory per link (above the replica before its links) and CPU
// time while idle (heartbeats, the standing check, last-seen updates, its
// beat in the shared state) as a percentage of one core. Run it with
// -benchtime 1x and an open-file limit above twice the links
// (bench/relay/capacity.sh raises it).
func BenchmarkClusterCapacity(b *testing.B) {
	simBin, err := benchkit.Build("LINKSIM_BIN", "relay-linksim", "github.com/commandcore/commandcore/bench/relay/cmd/linksim", "")
	if err != nil {
		b.Fatal(err)
	}
	per := envInt("CLUSTER_LINKS", 10000)
	c := setupCluster(b, 3)
	real := c.side(0, "real")
	time.Sleep(capacitySettle)
	var base []int64
	for _, r := range c.replicas {
		base = append(base, vmRSS(b, r.Process.Pid))
	}
	var sims []*linksim
	for i, u := range c.urls {
		sims = append(sims, startLinksimAt(b, simBin, u, c.db, fmt.Sprintf("r%d", i), per))
	}
	for i, s := range sims {
		up, ends, err := s.links(per)
		if err != nil {
			b.Fatalf("replica %d: %d links not reached: %v", i, per, err)
		}
		b.ReportMetric(up, fmt.Sprintf("r%d-up-s", i))
		b.ReportMetric(float64(ends), fmt.Sprintf("r%d-ends-before", i))
	}
	time.Sleep(capacitySettle)
	var cpu0 []time.Duration
	for _, r := range c.replicas {
		cpu0 = append(cpu0, cpuTime(r.Process.Pid))
	}
	time.Sleep(capacityWindow)
	for i, r := range c.replicas {
		idle := cpuTime(r.Process.Pid) - cpu0[i]
		rss := vmRSS(b, r.Process.Pid)
		b.ReportMetric(100*idle.Seconds()/capacityWindow.Seconds(), fmt.Sprintf("r%d-idle-cpu-pct", i))
		b.ReportMetric(float64(rss), fmt.Sprintf("r%d-rss-KiB", i))
		b.ReportMetric(float64(rss-base[i])/float64(per), fmt.Sprintf("r%d-KiB-per-link", i))
		b.ReportMetric(float64(sims[i].ends()), fmt.Sprintf("r%d-ends-after", i))
	}
	if _, err := real.call("process.jobs", nil, nil); err != nil {
		b.Fatalf("the real agent after the links came up: %v", err)
	}
	b.ReportMetric(0, "ns/op")
}
