// Package bench measures CommandCore's managed-job path on this machine:
// process.start latency against systemd-run, output-capture throughput
// against a plain pipe, and the supervisor's resident memory while it
// captures. These are measurements, not assertions: every benchmark reports
// its numbers as custom metrics and nothing fails on a missed target.
//
// Run everything with bench/run.sh (which also prints a summary), or one
// benchmark at a time, e.g.
//
//	go test ./bench -run '^$' -bench 'Start' -benchtime 50x
//	go test ./bench -run '^$' -bench 'Capture|PipeBaseline' -benchtime 1x
//	go test ./bench -run '^$' -bench 'SupervisorMemory' -benchtime 1x
//
// Like the e2e tests, the benchmarks use the shared systemd user manager
// (package systemdtest boots or reuses it). Set COMMANDCORE_BIN to benchmark
// a prebuilt binary; otherwise TestMain builds one.
package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/bench/benchkit"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/systemdtest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// ccBin is the commandcore binary under measurement; miniSup is the
// supervisor-only prototype (bench/cmd/minisup) some benchmarks launch in
// its place, and miniSupP1 the same with GOMAXPROCS=1.
var ccBin, miniSup, miniSupP1 string

func TestMain(m *testing.M) {
	// `go test ./...` visits this package too; only benchmark runs need
	// the binaries and the user manager.
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	var err error
	const mini = "github.com/commandcore/commandcore/bench/cmd/minisup"
	if ccBin, err = benchkit.Build("COMMANDCORE_BIN", "commandcore", "github.com/commandcore/commandcore/cmd/commandcore", ""); err == nil {
		if miniSup, err = benchkit.Build("MINISUP_BIN", "minisup", mini, ""); err == nil {
			miniSupP1, err = benchkit.Build("MINISUP_P1_BIN", "minisup-p1", mini, "-X main.maxProcs=1")
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Holds the shared users lock (so no test elsewhere kills the manager
	// mid-measurement) and exports XDG_RUNTIME_DIR / DBUS_SESSION_BUS_ADDRESS
	// for the launched `commandcore mcp` and systemd-run processes.
	systemdtest.Main(m)
}

// summarize and ms are the shared benchkit ones.
var (
	summarize = benchkit.Summarize
	ms        = benchkit.MS
)

// report publishes latency samples as custom metrics; ns/op becomes their
// mean, so untimed work between samples does not inflate it.
func report(b *testing.B, samples []time.Duration) {
	st := summarize(samples)
	var sum time.Duration
	for _, d := range samples {
		sum += d
	}
	if len(samples) > 0 {
		b.ReportMetric(float64(sum)/float64(len(samples)), "ns/op")
	}
	b.ReportMetric(ms(st.P50), "p50-ms")
	b.ReportMetric(ms(st.P90), "p90-ms")
	b.ReportMetric(ms(st.Min), "min-ms")
	b.ReportMetric(ms(st.Max), "max-ms")
}

// stateDir returns a fresh state directory: each batch of launches gets its
// own, so retention (100 unread terminal jobs) never refuses one.
func stateDir(b *testing.B) string {
	b.Helper()
	return b.TempDir()
}

// jobDir is where the job store keeps job id (see jobstore.Store.Dir).
func jobDir(state, id string) string { return filepath.Join(state, "jobs", id) }

// waitFile polls until path exists or timeout passes.
func waitFile(path string, every, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %v", filepath.Base(path), timeout)
		}
		time.Sleep(every)
	}
}

// waitEnded waits until job directory dir holds its supervisor's terminal
// record and the supervisor has exited: the agent believes a job's end
// only then.
func waitEnded(dir string, every, timeout time.Duration) error {
	if err := waitFile(filepath.Join(dir, jobmeta.ResultFile), every, timeout); err != nil {
		return err
	}
	claim, err := jobmeta.ReadClaim(dir)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		if alive, err := procid.Default().Alive(claim.Supervisor); err != nil || !alive {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the supervisor did not exit within %v", timeout)
		}
		time.Sleep(every)
	}
}

// mcpClient is one `commandcore mcp` process with an MCP session to it.
type mcpClient struct {
	session *mcp.ClientSession
	state   string
	cmd     *exec.Cmd
}

func newMCP(b *testing.B, state string) *mcpClient {
	b.Helper()
	return newMCPOf(b, ccBin, state)
}

// newMCPOf is newMCP for the commandcore binary bin.
func newMCPOf(b *testing.B, bin, state string) *mcpClient {
	b.Helper()
	cmd := exec.Command(bin, "mcp", "--state-dir", state)
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := testkit.Connect(ctx, "bench", testkit.Stdio(cmd), nil)
	if err != nil {
		b.Fatalf("connect to commandcore mcp: %v", err)
	}
	b.Cleanup(func() { s.Close() })
	return &mcpClient{session: s, state: state, cmd: cmd}
}

// callRaw invokes a tool and returns the SDK's result undecoded, so the
// caller can time exactly the round trip.
func (c *mcpClient) callRaw(tool string, args any) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return c.session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
}

func (c *mcpClient) call(tool string, args any, out any) error {
	res, err := c.callRaw(tool, args)
	return testkit.DecodeResult(tool, res, err, out)
}

// record is the part of process.status the benchmarks read.
type record struct {
	State    string `json:"state"`
	Terminal bool   `json:"terminal"`
	ExitCode *int   `json:"exit_code"`
	Capture  struct {
		Stdout struct {
			ObservedBytes *int64 `json:"observed_bytes"`
			Complete      bool   `json:"complete"`
		} `json:"stdout"`
	} `json:"capture"`
	Identity *struct {
		Supervisor struct {
			PID int `json:"pid"`
		} `json:"supervisor"`
		Child *struct {
			PID int `json:"pid"`
		} `json:"child"`
	} `json:"identity"`
	StartedAt   *time.Time `json:"started_at"`
	CompletedAt *time.Time `json:"completed_at"`
}

// finish waits for job id to be terminal (its supervisor publishes
// result.json), checks it exited 0, and forgets it.
func (c *mcpClient) finish(id string) (record, error) {
	var rec record
	if err := waitEnded(jobDir(c.state, id), 200*time.Microsecond, time.Minute); err != nil {
		return rec, err
	}
	// result.json is written before the supervisor exits, and an end is
	// believed only once it has.
	if err := testkit.Poll(20*time.Second, func() error {
		if err := c.call("process.status", map[string]any{"process_id": id}, &rec); err != nil {
			return err
		}
		if !rec.Terminal {
			return fmt.Errorf("job %s still %s", id, rec.State)
		}
		return nil
	}); err != nil {
		return rec, err
	}
	if rec.State != "exited" || rec.ExitCode == nil || *rec.ExitCode != 0 {
		return rec, fmt.Errorf("job %s ended %s (exit %v)", id, rec.State, rec.ExitCode)
	}
	return rec, c.call("process.forget", map[string]any{"process_id": id}, nil)
}

// newService builds the job core in this process as the CLI does
// (jobs.Open), with exe (ccBin, or miniSup) as the supervisor and its own
// state directory. Close it with Service.Close.
func newService(state, exe string) (*jobs.Service, error) {
	return jobs.Open(state, exe, false)
}

// finishService is finish for the in-process service.
func finishService(svc *jobs.Service, state, id string) error {
	if err := waitEnded(jobDir(state, id), 200*time.Microsecond, time.Minute); err != nil {
		return err
	}
	// A job launched here without the service has no supervisor on
	// record: its end counts once its unit is seen inactive.
	var rec *jobmeta.Record
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Microsecond) {
		var err error
		if rec, err = svc.Status(principal.Local, id); err != nil {
			return err
		}
		if rec.Terminal || time.Now().After(deadline) {
			break
		}
	}
	if rec.State != jobmeta.Exited {
		return fmt.Errorf("job %s ended %s", id, rec.State)
	}
	_, err := svc.Forget(principal.Local, id)
	return err
}

var errNotSystemd = errors.New("job did not run in a transient unit (failure_domain is not systemd_unit)")
