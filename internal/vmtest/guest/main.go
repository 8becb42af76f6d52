// Command guest runs inside the disposable test VM (see test/vm/run.sh) as
// root, against the guest's real systemd and root's real user manager. It
// drives the real commandcore binary over MCP, one phase per invocation:
//
//	oom                 a job over its owner memory cap ends workload_oom
//	reboot-1, crash-1   start a long job before an orderly / abrupt power-off
//	reboot-2, crash-2   on the next boot, that job reads host_rebooted
//	relay-service       the .deb's relay system service: a device enrolled
//	                    and a job run through it, linked again after a
//	                    restart (relay.go)
//	storm label=path... process.output under an output storm, per build
//	                    (a benchmark: test/vm/storm.sh)
//
// Each phase prints "PASS <phase>" or "FAIL <phase>: <reason>" to
// /dev/ttyS1, which the host reads as a file.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobresources"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/testkit"
)

const (
	bin      = "/usr/local/bin/commandcore"
	stateDir = "/var/lib/cctest"
	// memoryMax is the owner's cap; the OOM job allocates far more.
	memoryMax = 64 << 20
	results   = "/dev/ttyS1"
)

func main() {
	if len(os.Args) < 2 || (len(os.Args) > 2 && os.Args[1] != "storm") {
		fmt.Fprintln(os.Stderr, "usage: guest oom|reboot-1|reboot-2|crash-1|crash-2|relay-service|storm label=path...")
		os.Exit(2)
	}
	phase := os.Args[1]
	var err error
	switch phase {
	case "storm":
		err = stormPhase(os.Args[2:])
	case "oom":
		err = run(testOOM)
	case "relay-service":
		err = relayService()
	case "reboot-1", "crash-1":
		err = run(func(c *client) error { return beforeReboot(c, phase[:len(phase)-2]) })
	case "reboot-2", "crash-2":
		err = run(func(c *client) error { return afterReboot(c, phase[:len(phase)-2]) })
	default:
		err = fmt.Errorf("unknown phase %q", phase)
	}
	if err != nil {
		report("FAIL %s: %s", phase, oneLine(err.Error()))
		os.Exit(1)
	}
	report("PASS %s", phase)
}

// report writes one result line to the results port and to stdout (the
// guest's journal and console, for diagnosis).
func report(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	fmt.Println(line)
	if f, err := os.OpenFile(results, os.O_WRONLY|os.O_APPEND, 0); err == nil {
		fmt.Fprint(f, line+"\r\n")
		f.Close()
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// run waits for root's user bus, starts `commandcore mcp` and runs fn.
func run(fn func(*client) error) error {
	if err := waitFor(60*time.Second, func() bool {
		_, err := os.Stat("/run/user/0/bus")
		return err == nil
	}); err != nil {
		return fmt.Errorf("root's user bus never appeared: %w", err)
	}
	c, err := connect()
	if err != nil {
		return err
	}
	defer c.close()
	return fn(c)
}

// client is one `commandcore mcp` process with an MCP session to it.
type client struct {
	cmd     *exec.Cmd
	session *mcp.ClientSession
}

func connect() (*client, error) {
	cmd := exec.Command(bin, "mcp", "--state-dir", stateDir)
	// The test unit's INVOCATION_ID would make the agent believe it is an
	// installed service; the phases check the failure domain themselves.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "INVOCATION_ID=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := testkit.Connect(ctx, "vmtest", testkit.Stdio(cmd), nil)
	if err != nil {
		return nil, fmt.Errorf("connect to commandcore mcp: %w", err)
	}
	return &client{cmd: cmd, session: s}, nil
}

func (c *client) close() { c.session.Close() }

// call invokes a tool that must succeed and decodes its structured result.
func (c *client) call(tool string, args, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	return testkit.DecodeResult(tool, res, err, out)
}

func (c *client) start(name, command string) (*jobs.StartResult, error) {
	var res jobs.StartResult
	if err := c.call("process.start", jobs.StartRequest{Command: command, Name: name}, &res); err != nil {
		return nil, err
	}
	if res.FailureDomain != jobmeta.DomainSystemdUnit || res.Unit == "" {
		return nil, fmt.Errorf("job %s got failure domain %q (unit %q), want a systemd unit", res.ProcessID, res.FailureDomain, res.Unit)
	}
	return &res, nil
}

func (c *client) status(id string) (*jobmeta.Record, error) {
	var rec jobmeta.Record
	if err := c.call("process.status", map[string]string{"process_id": id}, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// testOOM runs a job under a 64 MiB owner cap that needs far more, watches
// systemd end its unit with Result=oom-kill, then checks the agent's
// classification and that the failed unit was reset.
func testOOM(c *client) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	pol, _ := json.Marshal(jobresources.Caps{MemoryMaxBytes: memoryMax})
	if err := os.WriteFile(filepath.Join(stateDir, jobresources.FileName), pol, 0o600); err != nil {
		return err
	}
	// The pause lets the test read the running record before the kill;
	// tail holds its whole newline-free input in memory.
	started, err := c.start("oom", "sleep 3; head -c 300M /dev/zero | tail; echo survived")
	if err != nil {
		return err
	}
	unit := started.Unit
	if v, err := unitProp(unit, "MemoryMax"); err != nil || v != strconv.Itoa(memoryMax) {
		return fmt.Errorf("unit %s MemoryMax=%q (%v), want %d", unit, v, err, memoryMax)
	}
	rec, err := c.status(started.ProcessID)
	if err != nil {
		return err
	}
	if rec.Claim == nil || rec.Claim.InvocationID == "" {
		return fmt.Errorf("running record has no invocation ID: state %s", rec.State)
	}
	inv := rec.Claim.InvocationID

	// systemd's own view, before the agent reads (and resets) it.
	if err := waitFor(60*time.Second, func() bool {
		s, _ := unitProp(unit, "ActiveState")
		return s == "failed" || s == "inactive"
	}); err != nil {
		s, _ := unitProp(unit, "ActiveState")
		return fmt.Errorf("unit %s never ended (ActiveState=%s)", unit, s)
	}
	result, _ := unitProp(unit, "Result")
	unitInv, _ := unitProp(unit, "InvocationID")
	if result != "oom-kill" || unitInv != inv {
		return fmt.Errorf("unit %s ended Result=%q InvocationID=%q, want oom-kill for %q", unit, result, unitInv, inv)
	}

	rec, err = c.status(started.ProcessID)
	if err != nil {
		return err
	}
	if rec.State != jobmeta.WorkloadOOM || !rec.Terminal {
		return fmt.Errorf("job %s state %q terminal=%v (exit %v signal %q), want workload_oom", rec.ProcessID, rec.State, rec.Terminal, deref(rec.ExitCode), rec.Signal)
	}
	// Reconciliation reset the failed unit once its evidence was recorded.
	if err := waitFor(10*time.Second, func() bool {
		s, _ := unitProp(unit, "LoadState")
		return s == "not-found"
	}); err != nil {
		s, _ := unitProp(unit, "LoadState")
		return fmt.Errorf("unit %s still loaded after classification (LoadState=%s)", unit, s)
	}
	fmt.Printf("oom: job %s unit %s invocation %s: Result=oom-kill, state workload_oom, unit reset\n", rec.ProcessID, unit, inv)
	return nil
}

// marker is what the first boot leaves for the second.
type marker struct {
	ProcessID string             `json:"process_id"`
	BootID    string             `json:"boot_id"`
	Identity  *jobmeta.ClaimView `json:"identity"`
}

const beforeOutput = "before-reboot"

func markerPath(kind string) string { return "/var/lib/cctest-" + kind + ".json" }

// beforeReboot starts a long job, confirms it runs with output, and leaves
// a marker; the caller then powers the guest off.
func beforeReboot(c *client, kind string) error {
	started, err := c.start(kind, "echo "+beforeOutput+"; exec sleep 100000")
	if err != nil {
		return err
	}
	var out jobs.Output
	if err := c.call("process.output", jobs.OutputRequest{ProcessID: started.ProcessID, WaitMS: 10000}, &out); err != nil {
		return err
	}
	if !strings.Contains(out.Stdout.Data, beforeOutput) {
		return fmt.Errorf("no output before the reboot: %q", out.Stdout.Data)
	}
	rec, err := c.status(started.ProcessID)
	if err != nil {
		return err
	}
	boot, err := bootID()
	if err != nil {
		return err
	}
	if rec.State != jobmeta.Running || rec.Claim == nil || rec.Claim.BootID != boot {
		return fmt.Errorf("job %s state %q identity %+v, want running on boot %s", rec.ProcessID, rec.State, rec.Claim, boot)
	}
	m, _ := json.Marshal(marker{ProcessID: rec.ProcessID, BootID: boot, Identity: rec.Claim})
	if err := os.WriteFile(markerPath(kind), m, 0o600); err != nil {
		return err
	}
	fmt.Printf("%s: job %s running on boot %s\n", kind, rec.ProcessID, boot)
	return nil
}

// afterReboot checks, on the next boot, that the job reads host_rebooted
// with its identity and output kept.
func afterReboot(c *client, kind string) error {
	data, err := os.ReadFile(markerPath(kind))
	if err != nil {
		return fmt.Errorf("no marker from the previous boot: %w", err)
	}
	var m marker
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	boot, err := bootID()
	if err != nil {
		return err
	}
	if boot == m.BootID {
		return fmt.Errorf("boot ID unchanged (%s): the guest did not reboot", boot)
	}
	rec, err := c.status(m.ProcessID)
	if err != nil {
		return err
	}
	// Every check runs, so one failure still shows what else held.
	var problems []string
	if rec.State != jobmeta.HostRebooted || !rec.Terminal {
		problems = append(problems, fmt.Sprintf("job %s state %q terminal=%v (exit %v signal %q), want host_rebooted",
			rec.ProcessID, rec.State, rec.Terminal, deref(rec.ExitCode), rec.Signal))
	}
	if rec.Claim == nil || rec.Claim.BootID != m.BootID || rec.Claim.InvocationID != m.Identity.InvocationID ||
		rec.Claim.Supervisor != m.Identity.Supervisor {
		problems = append(problems, fmt.Sprintf("identity not kept: got %+v, had %+v", rec.Claim, m.Identity))
	}
	var out jobs.Output
	if err := c.call("process.output", jobs.OutputRequest{ProcessID: m.ProcessID}, &out); err != nil {
		problems = append(problems, err.Error())
	} else if !strings.Contains(out.Stdout.Data, beforeOutput) {
		problems = append(problems, fmt.Sprintf("output not kept: %q", out.Stdout.Data))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Printf("%s: job %s host_rebooted (boot %s → %s), identity and output kept\n", kind, rec.ProcessID, m.BootID, boot)
	return nil
}

// unitProp reads one property of a unit from root's user manager.
func unitProp(unit, prop string) (string, error) {
	out, err := exec.Command("systemctl", "--user", "show", "--value", "-p", prop, unit).Output()
	return string(bytes.TrimSpace(out)), err
}

func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b)), err
}

func waitFor(d time.Duration, ok func() bool) error {
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			return errors.New("timed out after " + d.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}
