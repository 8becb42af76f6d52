package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/testkit"
)

// The storm phase (test/vm/storm.sh) is a benchmark, not a check: it
// compares commandcore builds under an output storm on this cgroup v2 host,
// where the user manager has the cpu controller. Each build's `commandcore
// mcp` runs as a transient service of root's user manager, in app.slice
// like an installed commandcore.service, and a probe job's output is paged
// idle and while stormProducers jobs write to stdout at full speed.
const (
	stormProducers = 12
	stormWindow    = 20 * time.Second
	idlePages      = 30
	stormRounds    = 2
)

// stormPhase runs stormRounds rounds; each runs every build once (label=path
// arguments), in the order given and then reversed, so neither build always
// runs first, and prints one RESULT line per run.
func stormPhase(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: guest storm label=path...")
	}
	if err := waitFor(60*time.Second, func() bool {
		_, err := os.Stat("/run/user/0/bus")
		return err == nil
	}); err != nil {
		return fmt.Errorf("root's user bus never appeared: %w", err)
	}
	describeHost()
	for round := 1; round <= stormRounds; round++ {
		for i := range args {
			a := args[i]
			if round%2 == 0 {
				a = args[len(args)-1-i]
			}
			label, path, ok := strings.Cut(a, "=")
			if !ok {
				return fmt.Errorf("argument %q is not label=path", a)
			}
			if err := stormRun(label, path, round); err != nil {
				return fmt.Errorf("%s round %d: %w", label, round, err)
			}
		}
	}
	return nil
}

// describeHost reports what decides CPU sharing here.
func describeHost() {
	read := func(p string) string {
		b, _ := os.ReadFile(p)
		return strings.TrimSpace(string(b))
	}
	sv, _ := exec.Command("systemctl", "--version").Output()
	first, _, _ := strings.Cut(string(sv), "\n")
	unitSlice, _ := unitProp("commandcore.service", "Slice")
	report("HOST kernel %s; %s; nproc %d; user@0.service subtree_control %q; autogroup %s; commandcore.service (unit file) Slice=%s",
		read("/proc/sys/kernel/osrelease"), first, cpus(),
		read("/sys/fs/cgroup/user.slice/user-0.slice/user@0.service/cgroup.subtree_control"),
		read("/proc/sys/kernel/sched_autogroup_enabled"), unitSlice)
}

func cpus() int {
	out, _ := exec.Command("nproc").Output()
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}

func stormRun(label, bin string, round int) error {
	state := fmt.Sprintf("/var/lib/cctest-storm-%s-%d", label, round)
	agent := fmt.Sprintf("cctest-agent-%s-%d.service", label, round)
	cmd := exec.Command("systemd-run", "--user", "--pipe", "--quiet", "--collect", "--unit", agent,
		bin, "mcp", "--state-dir", state)
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	s, err := testkit.Connect(ctx, "vmtest", testkit.Stdio(cmd), nil)
	cancel()
	if err != nil {
		return fmt.Errorf("connect to %s mcp: %w", label, err)
	}
	c := &client{cmd: cmd, session: s}
	defer c.close()
	agentCgroup, _ := unitProp(agent, "ControlGroup")

	probe, err := c.start("probe", "printf 'x%.0s' $(seq 1 100000); exec sleep 600")
	if err != nil {
		return err
	}
	jobCgroup, _ := unitProp(probe.Unit, "ControlGroup")
	page := func() (time.Duration, error) {
		t0 := time.Now()
		err := c.call("process.output", map[string]any{"process_id": probe.ProcessID, "stdout_offset": 30000, "max_bytes": 65536}, nil)
		return time.Since(t0), err
	}
	time.Sleep(time.Second)
	var idle, storm []time.Duration
	for range idlePages {
		d, err := page()
		if err != nil {
			return err
		}
		idle = append(idle, d)
	}
	var producers []string
	for range stormProducers {
		res, err := c.start("producer", "exec head -c 1T /dev/zero")
		if err != nil {
			return err
		}
		producers = append(producers, res.ProcessID)
	}
	for t0 := time.Now(); time.Since(t0) < stormWindow; {
		d, err := page()
		if err != nil {
			return err
		}
		storm = append(storm, d)
	}
	var written int64
	for _, id := range producers {
		rec, err := c.status(id)
		if err != nil {
			return err
		}
		if rec.Capture != nil && rec.Capture.Stdout.ObservedBytes != nil {
			written += *rec.Capture.Stdout.ObservedBytes
		}
		if err := c.call("process.stop", map[string]any{"process_id": id}, nil); err != nil {
			return err
		}
	}
	ids := append(producers, probe.ProcessID)
	c.call("process.stop", map[string]any{"process_id": probe.ProcessID}, nil)
	wait := 30000
	var w jobs.WaitResult
	if err := c.call("process.wait", jobs.WaitRequest{ProcessIDs: ids, Mode: "all", TimeoutMS: &wait}, &w); err != nil {
		return err
	}
	if len(w.Ended) != len(ids) {
		return fmt.Errorf("%d of %d jobs ended after their stop", len(w.Ended), len(ids))
	}
	pi, ps := p50(idle), p50(storm)
	report("RESULT %s round %d: process.output p50 idle %.1f ms (%d pages), storm %.1f ms (%d pages in %v, %d producers, %d MiB written by then), storm/idle %.2f; agent %s; job %s",
		label, round, ms(pi), len(idle), ms(ps), len(storm), stormWindow, stormProducers, written>>20, ms(ps)/ms(pi), agentCgroup, jobCgroup)
	return nil
}

func p50(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
