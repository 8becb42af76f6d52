package relaybench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/bench/benchkit"
)

// The capacity benchmark's knobs, from the environment (bench/relay/capacity.sh
// sets them): the link counts to measure at, in increasing order; how long
// the relay is left idle at each count while its CPU time is counted; and
// how many process.jobs calls are timed at each count.
var (
	capacityLinks  = envInts("CAPACITY_LINKS", []int{1, 1000, 5000, 10000})
	capacityWindow = envDuration("CAPACITY_WINDOW", 30*time.Second)
	capacityCalls  = envInt("CAPACITY_CALLS", 200)
)

// capacitySettle is how long the relay is left alone after links came up
// before it is measured: the last admissions' work and garbage are done.
const capacitySettle = 5 * time.Second

// BenchmarkRelayCapacity measures what idle device links cost one relay.
// It starts the relay and one real agent (setup), then bench/relay/cmd/linksim,
// which enrolls the other devices through the relay's state and its
// /v1/enroll and holds their links with the agent's own link code
// (heartbeats answered with the MAC, tokens rotated on every link). At
// each count in CAPACITY_LINKS, the real agent's link included, it
// reports the relay's resident memory per link above the single real
// link, the relay's CPU time while idle (heartbeats, standing polls,
// last-seen updates) as a percentage of one core, and the p50 and p99 of
// a real client's process.jobs call to the real agent through the relay.
// Run it with -benchtime 1x: every number comes from one pass.
func BenchmarkRelayCapacity(b *testing.B) {
	simBin, err := benchkit.Build("LINKSIM_BIN", "relay-linksim", "github.com/commandcore/commandcore/bench/relay/cmd/linksim", "")
	if err != nil {
		b.Fatal(err)
	}
	e := setup(b)
	top := capacityLinks[len(capacityLinks)-1]
	var sim *linksim
	if top > 1 {
		t0 := time.Now()
		sim = startLinksim(b, simBin, e, top-1)
		b.ReportMetric(time.Since(t0).Seconds(), "enroll-s")
	}
	base := int64(0)
	var p50At1 time.Duration
	for _, n := range capacityLinks {
		if n > 1 {
			up, ends, err := sim.links(n - 1)
			if err != nil {
				// What was measured below n stands; the log says why n was not reached.
				b.Logf("%d links not reached: %v", n, err)
				break
			}
			b.ReportMetric(up, fmt.Sprintf("n%d-up-s", n))
			b.ReportMetric(float64(ends), fmt.Sprintf("n%d-ends-before", n))
		}
		time.Sleep(capacitySettle)
		relay0, sim0 := cpuTime(e.relayPID), time.Duration(0)
		if sim != nil {
			sim0 = cpuTime(sim.cmd.Process.Pid)
		}
		time.Sleep(capacityWindow)
		idle := cpuTime(e.relayPID) - relay0
		b.ReportMetric(100*idle.Seconds()/capacityWindow.Seconds(), fmt.Sprintf("n%d-idle-cpu-pct", n))
		if sim != nil {
			used := cpuTime(sim.cmd.Process.Pid) - sim0
			b.ReportMetric(100*used.Seconds()/capacityWindow.Seconds(), fmt.Sprintf("n%d-sim-cpu-pct", n))
		}
		rss := vmRSS(b, e.relayPID)
		b.ReportMetric(float64(rss), fmt.Sprintf("n%d-rss-KiB", n))
		if n == capacityLinks[0] {
			base = rss
		} else {
			b.ReportMetric(float64(rss-base)/float64(n-capacityLinks[0]), fmt.Sprintf("n%d-KiB-per-link", n))
		}

		var samples []time.Duration
		for range capacityCalls {
			d, err := e.remote.call("process.jobs", nil, nil)
			if err != nil {
				b.Fatalf("process.jobs at %d links: %v", n, err)
			}
			samples = append(samples, d)
		}
		st := benchkit.Summarize(samples)
		b.ReportMetric(ms(st.P50), fmt.Sprintf("n%d-jobs-p50-ms", n))
		b.ReportMetric(ms(st.P99), fmt.Sprintf("n%d-jobs-p99-ms", n))
		if n == capacityLinks[0] {
			p50At1 = st.P50
		} else {
			b.ReportMetric(float64(st.P50)/float64(p50At1), fmt.Sprintf("n%d-jobs-p50-ratio", n))
		}
		lost := 0
		if sim != nil {
			lost = sim.ends()
			b.ReportMetric(float64(lost), fmt.Sprintf("n%d-ends-after", n))
		}
		b.ReportMetric(float64(n), "links-reached")
		b.Logf("%d links: relay RSS %d KiB, idle CPU %.2f %% of a core, process.jobs p50 %.2f ms p99 %.2f ms, %d links lost",
			n, rss, 100*idle.Seconds()/capacityWindow.Seconds(), ms(st.P50), ms(st.P99), lost)
	}
}

// linksim is a running bench/relay/cmd/linksim.
type linksim struct {
	b   *testing.B
	cmd *exec.Cmd
	in  io.Writer
	out *bufio.Scanner
}

// startLinksim starts linksim for e's relay with n devices and waits until
// it enrolled them.
func startLinksim(b *testing.B, bin string, e *env, n int) *linksim {
	b.Helper()
	return startLinksimAt(b, bin, e.url, e.relayState, "sim", n)
}

// startLinksimAt starts linksim for the relay at url whose state is state
// (a directory or a PostgreSQL URL), with n devices named names-NNNNN.
func startLinksimAt(b *testing.B, bin, url, state, names string, n int) *linksim {
	b.Helper()
	cmd := exec.Command(bin, "--server", url, "--relay-state", state, "--names", names, "--devices", strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// Closing its input ends every link; stop waits for it, or kills it.
	b.Cleanup(func() { in.Close(); stop(cmd) })
	s := &linksim{b: b, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	s.expect("enrolled", 2)
	return s
}

// next reads linksim's next line, which must be word and n more fields,
// and returns those fields.
func (s *linksim) next(word string, n int) ([]string, error) {
	if !s.out.Scan() {
		return nil, fmt.Errorf("linksim ended before %q (its error is on stderr)", word)
	}
	f := strings.Fields(s.out.Text())
	if len(f) != n+1 || f[0] != word {
		return nil, fmt.Errorf("linksim said %q, want %q and %d fields", s.out.Text(), word, n)
	}
	return f[1:], nil
}

// expect is next for a line that must come.
func (s *linksim) expect(word string, n int) []string {
	s.b.Helper()
	f, err := s.next(word, n)
	if err != nil {
		s.b.Fatal(err)
	}
	return f
}

// links brings linksim's live links to n and returns how long that took
// (seconds) and how many links had ended by then.
func (s *linksim) links(n int) (float64, int, error) {
	fmt.Fprintf(s.in, "links %d\n", n)
	f, err := s.next("links", 3)
	if err != nil {
		return 0, 0, err
	}
	up, _ := strconv.ParseFloat(f[1], 64)
	ends, _ := strconv.Atoi(f[2])
	return up, ends, nil
}

// ends is how many of linksim's links have ended since it started.
func (s *linksim) ends() int {
	s.b.Helper()
	fmt.Fprintln(s.in, "ends")
	n, _ := strconv.Atoi(s.expect("ends", 1)[0])
	return n
}

// vmRSS is process pid's resident set size in KiB.
func vmRSS(b *testing.B, pid int) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("VmRSS %q", v)
			}
			return kib
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// envInts reads a comma-separated list of increasing positive counts.
func envInts(name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || len(out) > 0 && n <= out[len(out)-1] {
			fmt.Fprintf(os.Stderr, "%s=%q: want increasing positive counts; using the default\n", name, v)
			return def
		}
		out = append(out, n)
	}
	return out
}
