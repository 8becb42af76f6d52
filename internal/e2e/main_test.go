// Package e2e drives the real commandcore binary with the official MCP Go
// SDK client, against the real systemd user manager that the test harness
// boots on this machine.
package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/systemdtest"
	"github.com/commandcore/commandcore/internal/testkit"
	"github.com/commandcore/commandcore/internal/tools"
)

// bin is the commandcore binary under test.
var bin string

func TestMain(m *testing.M) {
	// The test binary doubles as a deterministic output generator for jobs.
	if spec := os.Getenv("E2E_EMIT"); spec != "" {
		emit(spec)
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "commandcore-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "commandcore")
	if err := testkit.Build(bin, testkit.Main, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Every result is held to its tool's whole schema, not only to the
	// lean one tools/list carries.
	testkit.References = tools.ReferenceSchemas()
	systemdtest.Main(m)
}

// streamByte is the byte at position pos of the generated stream s.
func streamByte(s int, pos int64) byte {
	return byte(pos*31 + pos>>11 + int64(s)*101)
}

// emit writes E2E_EMIT="outBytes,errBytes,chunk" interleaved to stdout and
// stderr with position-derived content.
func emit(spec string) {
	var sizes [3]int64
	if _, err := fmt.Sscanf(spec, "%d,%d,%d", &sizes[0], &sizes[1], &sizes[2]); err != nil {
		os.Exit(2)
	}
	files := []*os.File{os.Stdout, os.Stderr}
	pos := [2]int64{}
	buf := make([]byte, sizes[2])
	for pos[0] < sizes[0] || pos[1] < sizes[1] {
		for s := 0; s < 2; s++ {
			n := min(sizes[2], sizes[s]-pos[s])
			if n <= 0 {
				continue
			}
			for i := int64(0); i < n; i++ {
				buf[i] = streamByte(s, pos[s]+i)
			}
			if _, err := files[s].Write(buf[:n]); err != nil {
				os.Exit(3)
			}
			pos[s] += n
		}
	}
}

// client is an MCP session to commandcore: a `commandcore mcp` process
// (cmd), or a relay's endpoint (cmd is nil).
type client struct {
	t       *testing.T
	cmd     *exec.Cmd
	session *mcp.ClientSession
	kit     *testkit.Client
}

// newClient starts `commandcore mcp` on stateDir with extra arguments and
// environment.
func newClient(t *testing.T, stateDir string, env []string, args ...string) *client {
	t.Helper()
	// Its own config directory: the tests must not meet the machine owner's
	// permission ceiling or identity.
	cmd := exec.Command(bin, append([]string{"mcp", "--state-dir", stateDir, "--config-dir", t.TempDir()}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	k, err := testkit.Dial(t, "e2e", testkit.Stdio(cmd), nil)
	if err != nil {
		t.Fatalf("connect to commandcore mcp: %v", err)
	}
	return &client{t: t, cmd: cmd, session: k.Session, kit: k}
}

// call invokes a tool and returns its structured content as JSON and
// whether it was an error result.
func (c *client) call(tool string, args any) (json.RawMessage, bool) {
	c.t.Helper()
	return c.kit.Call(tool, args)
}

// ok calls a tool that must succeed and decodes its result into out.
func (c *client) ok(tool string, args any, out any) {
	c.t.Helper()
	c.kit.OK(tool, args, out)
}

// fail calls a tool that must fail and returns its error code and message.
func (c *client) fail(tool string, args any) (string, string) {
	c.t.Helper()
	return c.kit.Fail(tool, args)
}

// record is the part of a job record the tests inspect.
type record struct {
	ProcessID     string     `json:"process_id"`
	State         string     `json:"state"`
	Terminal      bool       `json:"terminal"`
	Unit          string     `json:"unit"`
	FailureDomain string     `json:"failure_domain"`
	ExitCode      *int       `json:"exit_code"`
	Signal        string     `json:"signal"`
	Read          bool       `json:"read"`
	CompletedAt   *time.Time `json:"completed_at"`
	Capture       struct {
		Stdout, Stderr streamCapture
	} `json:"capture"`
	Identity *struct {
		Supervisor struct {
			PID        int    `json:"pid"`
			StartTicks uint64 `json:"start_ticks"`
		} `json:"supervisor"`
		Child *struct {
			PID int `json:"pid"`
		} `json:"child"`
		InvocationID string `json:"invocation_id"`
	} `json:"identity"`
}

type streamCapture struct {
	ObservedBytes *int64 `json:"observed_bytes"`
	RetainedBytes *int64 `json:"retained_bytes"`
	DroppedBytes  *int64 `json:"dropped_bytes"`
	Truncated     *bool  `json:"truncated"`
	Complete      bool   `json:"complete"`
}

func (c *client) start(req map[string]any) jobs.StartResult {
	c.t.Helper()
	var res jobs.StartResult
	c.ok("process.start", req, &res)
	if res.ProcessID == "" {
		c.t.Fatalf("process.start returned no process_id")
	}
	return res
}

func (c *client) status(id string) record {
	c.t.Helper()
	var r record
	c.ok("process.status", map[string]any{"process_id": id}, &r)
	return r
}

// waitState polls until the job reaches a terminal state or timeout.
func (c *client) waitTerminal(id string, timeout time.Duration) record {
	c.t.Helper()
	var r record
	testkit.Eventually(c.t, timeout, func() error {
		if r = c.status(id); !r.Terminal {
			return fmt.Errorf("job %s still %s", id, r.State)
		}
		return nil
	})
	return r
}

// decode returns a page's bytes.
func decode(t *testing.T, p jobs.StreamPage) []byte {
	t.Helper()
	if p.Encoding == "base64" {
		b, err := base64.StdEncoding.DecodeString(p.Data)
		if err != nil {
			t.Fatalf("bad base64 page: %v", err)
		}
		return b
	}
	if p.Encoding != "utf-8" {
		t.Fatalf("unknown encoding %q", p.Encoding)
	}
	return []byte(p.Data)
}

// collected is what paging a job's whole output returned.
type collected struct {
	// data is each stream's bytes in page order; ranges says where each
	// page's bytes sit in the stream.
	data   [2][]byte
	ranges [2][][2]int64
	gaps   [2][]jobs.Gap
	pages  int
	last   jobs.Output
}

// readAll pages both streams of a terminal job to EOF.
func (c *client) readAll(id string, maxBytes int) collected {
	c.t.Helper()
	var col collected
	var off [2]int64
	for {
		if col.pages > 10000 {
			c.t.Fatal("paging does not end")
		}
		var out jobs.Output
		c.ok("process.output", map[string]any{"process_id": id, "stdout_offset": off[0], "stderr_offset": off[1], "max_bytes": maxBytes}, &out)
		col.pages++
		for s, p := range []jobs.StreamPage{out.Stdout, out.Stderr} {
			if p.Gap != nil {
				col.gaps[s] = append(col.gaps[s], *p.Gap)
			}
			b := decode(c.t, p)
			if p.NextOffset != p.Offset+int64(len(b)) {
				c.t.Fatalf("page at %d with %d bytes says next_offset %d", p.Offset, len(b), p.NextOffset)
			}
			if len(b) > 0 {
				col.data[s] = append(col.data[s], b...)
				col.ranges[s] = append(col.ranges[s], [2]int64{p.Offset, p.NextOffset})
			}
			off[s] = p.NextOffset
		}
		col.last = out
		if out.Stdout.EOF && out.Stderr.EOF {
			return col
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// executable is the test binary, which jobs run as an output generator.
func executable() (string, error) { return os.Executable() }

// stopAndWait stops a job and waits until it is terminal, so a test's
// temporary state directory is not removed under a finishing supervisor.
func (c *client) stopAndWait(id string) {
	c.t.Helper()
	c.call("process.stop", map[string]any{"process_id": id})
	c.waitTerminal(id, 20*time.Second)
}

// kill ends the `commandcore mcp` process with SIGKILL, as a crash would,
// and lets the SDK reap it.
func (c *client) kill() {
	c.t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	c.session.Close()
}

// childPID waits until the supervisor has recorded the shell's identity (it
// does so just after starting it, a moment after the claim process.start
// waits for) and returns the shell's PID.
func (c *client) childPID(id string) int {
	c.t.Helper()
	for i := 0; ; i++ {
		r := c.status(id)
		if r.Identity != nil && r.Identity.Child != nil {
			return r.Identity.Child.PID
		}
		if i > 200 {
			c.t.Fatalf("job %s never recorded its shell", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
