package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/google/uuid"

	"github.com/commandcore/commandcore/internal/envelope"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobresources"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/launcher"
	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/roles"
	"github.com/commandcore/commandcore/internal/statedir"
	"github.com/commandcore/commandcore/internal/testkit"
)

// The launch benchmarks time b.N launches of a short job (`true`) and report
// the median (p50-ms) and p90 (p90-ms) of the per-launch latency; ns/op is
// the mean. After each timed launch the job is left to finish and is
// forgotten, untimed, so launches never overlap and the state directory
// stays empty (retention never refuses a launch). Run with -benchtime 50x
// for 50 samples; each benchmark also makes one untimed warm-up launch (the
// first one connects to the user bus).

// sampler makes one launch and returns its latency. Whatever it does after
// the measured span (waiting for the job to end, forgetting it) is untimed.
type sampler struct {
	name string
	run  func() (time.Duration, error)
}

// measure warms s up once and reports b.N samples of it.
func measure(b *testing.B, s sampler) {
	if _, err := s.run(); err != nil {
		b.Fatalf("%s warm-up: %v", s.name, err)
	}
	samples := make([]time.Duration, 0, b.N)
	for range b.N {
		d, err := s.run()
		if err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		samples = append(samples, d)
	}
	report(b, samples)
}

// mcpStart is process.start over MCP stdio: from the client's CallTool
// until the result arrives (the supervisor's identity claim is on disk by
// then).
func mcpStart(b *testing.B) sampler {
	c := newMCP(b, stateDir(b))
	return sampler{"mcp", func() (time.Duration, error) {
		args := map[string]any{"command": "true"}
		t0 := time.Now()
		res, err := c.callRaw("process.start", args)
		d := time.Since(t0)
		var out jobs.StartResult
		if err := testkit.DecodeResult("process.start", res, err, &out); err != nil {
			return d, err
		}
		if out.FailureDomain != jobmeta.DomainSystemdUnit {
			return d, errNotSystemd
		}
		_, err = c.finish(out.ProcessID)
		// The agent starts a spare supervisor for the next job after each
		// launch; its start (about one unit start) is let finish here,
		// outside the timing, so that it lands on no other sampler.
		time.Sleep(spareSettle)
		return d, err
	}}
}

// spareSettle is how long the MCP sampler leaves the agent to start its
// next spare: a few unit starts.
const spareSettle = 60 * time.Millisecond

// serviceStart is jobs.Service.Start in this process, with exe as the
// supervisor binary, launching as mode says.
func serviceStart(b *testing.B, name, exe string, mode launchMode) sampler {
	state := stateDir(b)
	svc, err := newService(state, exe)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(svc.Close)
	if mode != unitPlain {
		hideLikeTheAgent(b, svc)
	}
	fallback := mode == fallbackHidden
	domain := jobmeta.DomainSystemdUnit
	if fallback {
		domain = jobmeta.DomainSharedParentCgroup
	}
	ctx := context.Background()
	return sampler{name, func() (time.Duration, error) {
		if fallback {
			defer hideBus()()
		}
		t0 := time.Now()
		res, err := svc.Start(ctx, principal.Local, jobs.StartRequest{Command: "true"})
		d := time.Since(t0)
		if err != nil {
			return d, err
		}
		if res.FailureDomain != domain {
			return d, fmt.Errorf("job ran in failure domain %s, want %s", res.FailureDomain, domain)
		}
		return d, finishService(svc, state, res.ProcessID)
	}}
}

// launchMode is how serviceStart's service launches.
type launchMode int

const (
	// unitHidden: a transient unit with the agent's directories hidden,
	// as the agent launches where the manager can hide them.
	unitHidden launchMode = iota
	// unitPlain: a transient unit without hiding (a manager that cannot).
	unitPlain
	// fallbackHidden: the user bus hidden from the launcher for each
	// launch, so the supervisor is fork/exec'd directly (failure domain
	// shared_parent_cgroup) through the hide-exec role.
	fallbackHidden
)

// hideLikeTheAgent makes svc hide the agent's directories from its jobs as
// the agent's does at start (jobs.Service.HideOwnDirs, with a config
// directory of its own and jobs not cut off), and fails b if the user
// manager cannot: a launch figure without it is not the shipped one.
func hideLikeTheAgent(b *testing.B, svc *jobs.Service) {
	b.Helper()
	h := svc.HideOwnDirs(context.Background(), b.TempDir(), func() (bool, error) { return false, nil })
	if !h.Units {
		b.Fatal("the user manager cannot hide the agent's directories from job units")
	}
}

// binaryDir is the directory of the binary under test, which the agent's
// job units and process.run commands see read-only, as a list for
// launcher.Hidden and hideexec.Covers (none where it is not to be).
func binaryDir() []string {
	if b := launcher.AgentBinary(ccBin); b.ReadOnly() {
		return []string{b.Dir}
	}
	return nil
}

// hideBus unsets the user bus variables (the launcher then falls back) and
// returns the function that restores them.
func hideBus() func() {
	vars := []string{"DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR"}
	old := map[string]string{}
	for _, k := range vars {
		old[k] = os.Getenv(k)
		os.Unsetenv(k)
	}
	return func() {
		for k, v := range old {
			os.Setenv(k, v)
		}
	}
}

// systemdRun times one systemd-run invocation from exec until it exits,
// then gives the unit 10 ms to run and be collected, untimed.
func systemdRun(name string, args ...string) sampler {
	return sampler{name, func() (time.Duration, error) {
		cmd := exec.Command("systemd-run", args...)
		cmd.Stderr = os.Stderr
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		time.Sleep(10 * time.Millisecond)
		return d, err
	}}
}

// systemdRunNoBlock is the brief's baseline: the CLI returns once the start
// job is queued, before the unit has started.
func systemdRunNoBlock() sampler {
	return systemdRun("sdrun-noblock", "--user", "--no-block", "--quiet", "-p", "Type=exec", "true")
}

// systemdRunBlocking waits for the start job too (Type=exec: until `true`
// has been exec'd), which is closer to what process.start promises.
func systemdRunBlocking() sampler {
	return systemdRun("sdrun-block", "--user", "--quiet", "-p", "Type=exec", "true")
}

// systemdRunHidden is systemdRunBlocking with the sandbox a job unit gets
// where the agent's directories are hidden (the launcher's hideProperties):
// two read-only tmpfs over two directories, a third bound back inside one.
func systemdRunHidden(b *testing.B) sampler {
	state, config := b.TempDir(), b.TempDir()
	job := filepath.Join(state, "job")
	if err := os.Mkdir(job, 0o700); err != nil {
		b.Fatal(err)
	}
	return systemdRun("sdrun-block-hide", "--user", "--quiet", "-p", "Type=exec",
		"-p", "TemporaryFileSystem="+state+":ro "+config+":ro", "-p", "BindPaths="+job, "true")
}

// dbusTrue is the floor of the D-Bus launch path: StartTransientUnit of
// /bin/true (Type=exec) from Go over a warm connection, until the start
// job is done.
func dbusTrue(b *testing.B) sampler {
	ctx := context.Background()
	conn, err := sdbus.NewUserConnectionContext(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Close)
	i := 0
	return sampler{"dbus-true", func() (time.Duration, error) {
		i++
		name := fmt.Sprintf("ccbench-%d-%d.service", os.Getpid(), i)
		props := []sdbus.Property{sdbus.PropType("exec"), sdbus.PropExecStart([]string{"/bin/true"}, false)}
		done := make(chan string, 1)
		t0 := time.Now()
		if _, err := conn.StartTransientUnitContext(ctx, name, "fail", props, done); err != nil {
			return 0, err
		}
		if res := <-done; res != "done" {
			return 0, fmt.Errorf("start job %s", res)
		}
		d := time.Since(t0)
		time.Sleep(10 * time.Millisecond)
		return d, nil
	}}
}

// BenchmarkStartMCP: process.start over MCP stdio.
func BenchmarkStartMCP(b *testing.B) { measure(b, mcpStart(b)) }

// BenchmarkStartService: jobs.Service.Start in this process (no MCP,
// JSON-RPC or stdio).
func BenchmarkStartService(b *testing.B) { measure(b, serviceStart(b, "svc", ccBin, unitHidden)) }

// BenchmarkStartServiceMiniSup: BenchmarkStartService with the
// supervisor-only prototype (bench/cmd/minisup) as the supervisor binary.
func BenchmarkStartServiceMiniSup(b *testing.B) {
	measure(b, serviceStart(b, "svc-minisup", miniSup, unitHidden))
}

// BenchmarkStartServiceFallback: BenchmarkStartService without the user bus
// (the supervisor is fork/exec'd directly), which separates the
// systemd/D-Bus share of a launch from the supervisor's.
func BenchmarkStartServiceFallback(b *testing.B) {
	measure(b, serviceStart(b, "svc-fallback", ccBin, fallbackHidden))
}

// BenchmarkSystemdRunNoBlock: `systemd-run --user --no-block --quiet -p
// Type=exec true`, exec to exit.
func BenchmarkSystemdRunNoBlock(b *testing.B) { measure(b, systemdRunNoBlock()) }

// BenchmarkSystemdRunBlocking: the same without --no-block.
func BenchmarkSystemdRunBlocking(b *testing.B) { measure(b, systemdRunBlocking()) }

// BenchmarkDBusTransientTrue: StartTransientUnit of /bin/true from Go.
func BenchmarkDBusTransientTrue(b *testing.B) { measure(b, dbusTrue(b)) }

// BenchmarkStartCompare runs the launch samplers interleaved — each
// iteration makes one launch of each, in an order shuffled per iteration
// (a rotation would keep each sampler behind the same neighbour, whose
// unit's teardown it would always pay for) — so background load on a
// shared machine hits all of them alike. It reports
// <name>-p50-ms and <name>-p90-ms for each and the ratios of the medians:
//
//	mcp/sdrun-block    the launch target (<= 1.0): systemd-run waiting for
//	                   its start job, as process.start waits for the claim
//	mcp/dbus-true      the launch target against the D-Bus floor (<= 2.0)
//	mcp/sdrun-block-hide  against systemd-run with the same sandbox
//	mcp/svc            what MCP stdio and JSON add over the in-process call
//	svc-minisup/svc    what a supervisor linking nothing else would save
//	svc-nohide/svc     what hiding the agent's directories from the unit
//	                   (a mount namespace per job) costs
//
// mcp-status is the MCP round trip of a call that does almost nothing
// (process.status of an unknown job): the framing's share of mcp - svc.
func BenchmarkStartCompare(b *testing.B) {
	c := newMCP(b, stateDir(b))
	ss := []sampler{
		mcpStart(b),
		{"mcp-status", func() (time.Duration, error) {
			t0 := time.Now()
			res, err := c.callRaw("process.status", map[string]any{"process_id": "00000000-0000-4000-8000-000000000000"})
			d := time.Since(t0)
			if err == nil && !res.IsError {
				err = errors.New("process.status of an unknown job did not fail")
			}
			return d, err
		}},
		serviceStart(b, "svc", ccBin, unitHidden),
		serviceStart(b, "svc-minisup", miniSup, unitHidden),
		serviceStart(b, "svc-fallback", ccBin, fallbackHidden),
		serviceStart(b, "svc-nohide", ccBin, unitPlain),
		systemdRunNoBlock(),
		systemdRunBlocking(),
		systemdRunHidden(b),
		dbusTrue(b),
	}
	samples := make([][]time.Duration, len(ss))
	for _, s := range ss {
		if _, err := s.run(); err != nil {
			b.Fatalf("%s warm-up: %v", s.name, err)
		}
	}
	order := rand.New(rand.NewPCG(1, 2))
	for range b.N {
		for _, j := range order.Perm(len(ss)) {
			d, err := ss[j].run()
			if err != nil {
				b.Fatalf("%s: %v", ss[j].name, err)
			}
			samples[j] = append(samples[j], d)
		}
	}
	p50 := map[string]time.Duration{}
	for j, s := range ss {
		st := summarize(samples[j])
		p50[s.name] = st.P50
		b.ReportMetric(ms(st.P50), s.name+"-p50-ms")
		b.ReportMetric(ms(st.P90), s.name+"-p90-ms")
	}
	b.ReportMetric(0, "ns/op")
	ratio := func(a, c string) {
		b.ReportMetric(float64(p50[a])/float64(p50[c]), a+"/"+c)
	}
	ratio("mcp", "sdrun-block")
	ratio("mcp", "dbus-true")
	ratio("mcp", "sdrun-block-hide")
	ratio("mcp", "svc")
	ratio("svc-minisup", "svc")
	ratio("svc-nohide", "svc")
}

// BenchmarkStartBurst is process.start over MCP stdio called burstLen
// times back to back, the way a client starts several jobs at once: the
// first launch finds the agent's spare supervisor ready, the ones after it
// come before the next spare is up and start their own unit. first-p50-ms
// is the first launch of each burst, rest-p50-ms the others.
func BenchmarkStartBurst(b *testing.B) {
	c := newMCP(b, stateDir(b))
	start := func() (time.Duration, string, error) {
		t0 := time.Now()
		res, err := c.callRaw("process.start", map[string]any{"command": "true"})
		d := time.Since(t0)
		var out jobs.StartResult
		if err := testkit.DecodeResult("process.start", res, err, &out); err != nil {
			return d, "", err
		}
		return d, out.ProcessID, nil
	}
	if _, id, err := start(); err != nil {
		b.Fatal(err)
	} else if _, err := c.finish(id); err != nil {
		b.Fatal(err)
	}
	var first, rest []time.Duration
	for range b.N {
		time.Sleep(spareSettle)
		ids := make([]string, 0, burstLen)
		for i := range burstLen {
			d, id, err := start()
			if err != nil {
				b.Fatal(err)
			}
			if i == 0 {
				first = append(first, d)
			} else {
				rest = append(rest, d)
			}
			ids = append(ids, id)
		}
		for _, id := range ids {
			if _, err := c.finish(id); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(summarize(first).P50), "first-p50-ms")
	b.ReportMetric(ms(summarize(rest).P50), "rest-p50-ms")
	b.ReportMetric(ms(summarize(rest).P90), "rest-p90-ms")
}

// burstLen is how many launches BenchmarkStartBurst makes back to back.
const burstLen = 4

// BenchmarkStartPhases replays jobs.Service's launch sequence step by step
// with the packages' exported parts, wired as jobs.Open wires them, and
// times each phase:
//
//	policy: jobresources.Load of the state directory
//	admit:  jobstore.Store.Admit (lock, list, prune, mkdir, job.json)
//	unit:   launcher.Start: StartTransientUnit over D-Bus until the start
//	        job is done (Type=exec: the supervisor has been exec'd)
//	claim:  from then until the claim exists, polled every 50 µs: the
//	        manager's fork, cgroup attach and exec, the supervisor role's
//	        start (BenchmarkExecSupervise) and its claim
//	ready:  from the claim until the start job completes (READY=1 reached
//	        the manager and its JobRemoved signal reached us)
//	get:    jobstore.Store.Get of the new job (Service.Start does it)
//	health: the host_health snapshot process.start returns
//
// Each iteration also makes one jobs.Service.Start launch (svc), alternating
// which goes first: the difference of the medians, svc - total, is what the
// service's coarser claim polling (0.5 ms doubling to 16 ms, then 20 ms)
// adds over watching for the claim every 50 µs.
func BenchmarkStartPhases(b *testing.B) {
	state := stateDir(b)
	svc, err := newService(state, ccBin)
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	store, err := jobstore.Open(state, procid.Default())
	if err != nil {
		b.Fatal(err)
	}
	device, err := statedir.LocalDeviceID(state)
	if err != nil {
		b.Fatal(err)
	}
	host, err := metrics.NewSource("/proc")
	if err != nil {
		b.Fatal(err)
	}
	l := launcher.New(ccBin, false)
	defer l.Close()
	ctx := context.Background()
	// Hidden as the agent's units are (see hideLikeTheAgent).
	config := b.TempDir()
	hide := launcher.Hidden{State: state, Config: config, ReadOnly: binaryDir()}
	if !l.ProbeHiding(ctx, hide) {
		b.Fatal("the user manager cannot hide the agent's directories from job units")
	}
	l.Hide = &hide
	home, _ := os.UserHomeDir()
	env := &envelope.Envelope{Version: envelope.Version, Command: "true", Env: jobs.BaseEnvironment(os.Environ()), Cwd: home, Shell: jobs.DefaultShell()}

	names := []string{"policy", "admit", "unit", "claim", "ready", "get", "health", "total"}
	launch := func() ([]time.Duration, string, error) {
		var ts [8]time.Time
		ts[0] = time.Now()
		caps, err := jobresources.Load(state)
		if err != nil {
			return nil, "", err
		}
		ts[1] = time.Now()
		id := uuid.NewString()
		job := &jobmeta.Job{
			Schema: jobmeta.SchemaVersion, ID: id, DeviceID: device, FailureDomain: jobmeta.DomainSystemdUnit,
			Unit: launcher.UnitName(device, id), CreatedAt: store.Now(),
		}
		if err := store.Admit(job); err != nil {
			return nil, "", err
		}
		ts[2] = time.Now()
		r, w, err := os.Pipe()
		if err != nil {
			return nil, id, err
		}
		defer r.Close()
		wrote := make(chan error, 1)
		go func() {
			err := envelope.Encode(w, env)
			w.Close()
			wrote <- err
		}()
		started, err := l.Start(ctx, jobmeta.DomainSystemdUnit, launcher.Spec{Unit: job.Unit, JobDir: store.Dir(id), Stdin: r, Resources: caps})
		if err != nil {
			return nil, id, err
		}
		ts[3] = time.Now()
		if err := waitFile(filepath.Join(store.Dir(id), jobmeta.ClaimFile), 50*time.Microsecond, 10*time.Second); err != nil {
			return nil, id, err
		}
		ts[4] = time.Now()
		select {
		case <-started.Ready:
		case <-started.Failed:
			return nil, id, errors.New("the start job failed")
		case <-time.After(10 * time.Second):
			return nil, id, errors.New("no READY")
		}
		ts[5] = time.Now()
		if _, err := store.Get(id); err != nil {
			return nil, id, err
		}
		ts[6] = time.Now()
		host.Health(state)
		ts[7] = time.Now()
		if err := <-wrote; err != nil {
			return nil, id, err
		}
		out := make([]time.Duration, 0, len(names))
		for i := 1; i < len(ts); i++ {
			out = append(out, ts[i].Sub(ts[i-1]))
		}
		return append(out, ts[7].Sub(ts[0])), id, nil
	}
	if _, id, err := launch(); err != nil {
		b.Fatal(err)
	} else if err := finishService(svc, state, id); err != nil {
		b.Fatal(err)
	}
	svcStart := serviceStart(b, "svc", ccBin, unitHidden)
	if _, err := svcStart.run(); err != nil {
		b.Fatal(err)
	}
	samples := make([][]time.Duration, len(names))
	var svcSamples []time.Duration
	for i := range b.N {
		for k := range 2 {
			if (i+k)%2 == 0 {
				d, err := svcStart.run()
				if err != nil {
					b.Fatal(err)
				}
				svcSamples = append(svcSamples, d)
				continue
			}
			p, id, err := launch()
			if err != nil {
				b.Fatal(err)
			}
			for i := range p {
				samples[i] = append(samples[i], p[i])
			}
			if err := finishService(svc, state, id); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	var total time.Duration
	for i, name := range names {
		st := summarize(samples[i])
		b.ReportMetric(ms(st.P50), name+"-p50-ms")
		b.ReportMetric(ms(st.P90), name+"-p90-ms")
		total = st.P50
	}
	svcP50 := summarize(svcSamples).P50
	b.ReportMetric(ms(svcP50), "svc-p50-ms")
	b.ReportMetric(ms(svcP50-total), "poll-loss-ms")
}

// execSampler times fork/exec/wait of argv.
func execSampler(argv ...string) sampler {
	return sampler{filepath.Base(argv[0]), func() (time.Duration, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		t0 := time.Now()
		err := cmd.Run()
		return time.Since(t0), err
	}}
}

// BenchmarkExecBinTrue is the fork/exec/wait floor of a tiny C program.
func BenchmarkExecBinTrue(b *testing.B) { measure(b, execSampler("/bin/true")) }

// BenchmarkExecCommandcoreVersion is the start-up floor of the commandcore
// binary (Go runtime, every package's init, cobra), which every supervisor
// pays before it can claim its identity.
func BenchmarkExecCommandcoreVersion(b *testing.B) { measure(b, execSampler(ccBin, "version")) }

// BenchmarkExecSupervise is the start-up floor of the supervisor role
// itself: the Go runtime and every linked package's init, then an exit at
// once on a job directory that is not absolute.
func BenchmarkExecSupervise(b *testing.B) {
	measure(b, sampler{"supervise", func() (time.Duration, error) {
		cmd := exec.Command(ccBin, roles.Supervise, "relative")
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
			return d, fmt.Errorf("supervise on a relative directory: %v, want exit status 1", err)
		}
		return d, nil
	}})
}

// BenchmarkExecMiniSup is the same floor for the supervisor-only prototype
// (it exits at once with a usage error).
func BenchmarkExecMiniSup(b *testing.B) {
	measure(b, sampler{"minisup", func() (time.Duration, error) {
		t0 := time.Now()
		exec.Command(miniSup).Run() // exits 2: no arguments
		return time.Since(t0), nil
	}})
}
