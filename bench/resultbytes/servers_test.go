package resultbytes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/testkit"
)

// beforeCommit is this repository's last commit before compact results.
const beforeCommit = "c9465b3"

// Desktop Commander as the issue names it.
const (
	dcPackage = "@wonderwhy-er/desktop-commander"
	dcVersion = "0.2.52"
)

// cacheDir is where the built "before" binary and the npm install are
// kept between runs: both are pinned versions, so a cached one is the same.
func cacheDir() string { return filepath.Join(os.TempDir(), "commandcore-bench") }

// beforeBin is commandcore as of beforeCommit, built from `git archive` of
// that commit (no worktree left behind if the build is interrupted).
func beforeBin() (string, error) {
	if bin := os.Getenv("COMMANDCORE_BEFORE_BIN"); bin != "" {
		return filepath.Abs(bin)
	}
	out := filepath.Join(cacheDir(), "before-"+beforeCommit)
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if _, err := exec.LookPath("git"); err != nil {
		return "", fmt.Errorf("git: %w", err)
	}
	src, err := os.MkdirTemp("", "commandcore-before-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("find the repository: %w", err)
	}
	tarball := filepath.Join(src, "src.tar")
	archive := exec.Command("git", "archive", "-o", tarball, beforeCommit)
	archive.Dir, archive.Stderr = strings.TrimSpace(string(top)), os.Stderr
	if err := archive.Run(); err != nil {
		return "", fmt.Errorf("git archive %s: %w", beforeCommit, err)
	}
	unpack := exec.Command("tar", "-xf", tarball, "-C", src)
	unpack.Stderr = os.Stderr
	if err := unpack.Run(); err != nil {
		return "", fmt.Errorf("unpack %s: %w", beforeCommit, err)
	}
	if err := os.MkdirAll(cacheDir(), 0o755); err != nil {
		return "", err
	}
	// Built under a temporary name, so an interrupted build is not cached.
	build := exec.Command("go", "build", "-o", out+".tmp", "./cmd/commandcore")
	build.Dir, build.Stdout, build.Stderr = src, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build %s: %w", beforeCommit, err)
	}
	return out, os.Rename(out+".tmp", out)
}

// dcEntry is Desktop Commander's dist/index.js, installed with npm unless
// DESKTOP_COMMANDER_DIR or an earlier run already has it. Install scripts
// stay off: the package's own postinstall reports the installation to its
// telemetry, and puppeteer's downloads a browser.
func dcEntry() (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	prefix, given := os.LookupEnv("DESKTOP_COMMANDER_DIR")
	if !given {
		prefix = filepath.Join(cacheDir(), "desktop-commander-"+dcVersion)
	}
	pkg := filepath.Join(prefix, "node_modules", dcPackage)
	if v, err := packageVersion(pkg); err == nil && v == dcVersion {
		return filepath.Join(pkg, "dist", "index.js"), nil
	} else if given {
		return "", fmt.Errorf("DESKTOP_COMMANDER_DIR has no %s@%s (version %q, %v)", dcPackage, dcVersion, v, err)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", fmt.Errorf("npm: %w", err)
	}
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		return "", err
	}
	install := exec.Command("npm", "install", "--prefix", prefix, "--no-audit", "--no-fund", "--ignore-scripts", dcPackage+"@"+dcVersion)
	install.Env = append(os.Environ(), "PUPPETEER_SKIP_DOWNLOAD=1")
	install.Stdout, install.Stderr = os.Stderr, os.Stderr
	if err := install.Run(); err != nil {
		return "", fmt.Errorf("npm install %s@%s: %w", dcPackage, dcVersion, err)
	}
	if v, err := packageVersion(pkg); err != nil || v != dcVersion {
		return "", fmt.Errorf("npm installed %s version %q (%v), want %s", dcPackage, v, err, dcVersion)
	}
	return filepath.Join(pkg, "dist", "index.js"), nil
}

func packageVersion(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return "", err
	}
	var p struct{ Version string }
	if err := json.Unmarshal(data, &p); err != nil {
		return "", err
	}
	return p.Version, nil
}

// dcCommand runs Desktop Commander with telemetry off and a home of its
// own (it keeps its config and usage counters in ~/.claude-server-commander).
func dcCommand(b *testing.B, entry string) *exec.Cmd {
	cmd := exec.Command("node", entry)
	cmd.Env = append(os.Environ(), "HOME="+b.TempDir(), "DESKTOP_COMMANDER_DISABLE_TELEMETRY=1")
	return cmd
}

// ccCommand runs `commandcore mcp` of bin with state and config of its own.
func ccCommand(b *testing.B, bin string) *exec.Cmd {
	return exec.Command(bin, "mcp", "--state-dir", b.TempDir(), "--config-dir", b.TempDir())
}

// server is one MCP server over stdio whose tools/call results are also
// seen as the bytes that came over the wire.
type server struct {
	session *mcp.ClientSession
	tap     *tap
	// dump, when set, is given every result as sent.
	dump func(tool string, raw json.RawMessage)
}

// open starts cmd as the server called name. With RESULTBYTES_OUT set,
// every result is also appended, as sent, to $RESULTBYTES_OUT/name.jsonl.
func open(b *testing.B, name string, cmd *exec.Cmd) *server {
	b.Helper()
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), testkit.ConnectTimeout)
	defer cancel()
	t := &tap{}
	s, err := testkit.Connect(ctx, "bench", &tapTransport{testkit.Stdio(cmd), t}, nil)
	if err != nil {
		b.Fatalf("connect to %s: %v", cmd.Path, err)
	}
	b.Cleanup(func() { s.Close() })
	srv := &server{session: s, tap: t}
	if dir := os.Getenv("RESULTBYTES_OUT"); dir != "" {
		f, err := os.OpenFile(filepath.Join(dir, name+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		srv.dump = func(tool string, raw json.RawMessage) {
			line, _ := json.Marshal(struct {
				Tool   string          `json:"tool"`
				Result json.RawMessage `json:"result"`
			}{tool, raw})
			f.Write(append(line, '\n'))
		}
	}
	return srv
}

// size is one result's bytes. Whole is the JSON object of the result's
// content, structuredContent and isError as the server sent them; Text is
// the text content's bytes; Other is the rest of the result object (the
// _meta with serverInfo and the resultType the newest protocol revision
// adds to every result: the SDK's, not the tool's).
type size struct{ Whole, Text, Other int }

// call invokes a tool that must succeed and measures its result.
func (s *server) call(b *testing.B, tool string, args any) (*mcp.CallToolResult, size) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.CallTimeout)
	defer cancel()
	res, err := s.session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		b.Fatalf("%s: %v", tool, err)
	}
	raw := s.tap.take()
	if res.IsError {
		b.Fatalf("%s failed: %s", tool, raw)
	}
	sz, err := measure(raw, res)
	if err != nil {
		b.Fatalf("%s: %v", tool, err)
	}
	if s.dump != nil {
		s.dump(tool, raw)
	}
	return res, sz
}

func measure(raw json.RawMessage, res *mcp.CallToolResult) (size, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return size{}, fmt.Errorf("result as sent: %w", err)
	}
	// The raw values keep their bytes as sent (json.Marshal would
	// compact and HTML-escape them); only the object around them is
	// rebuilt.
	var w bytes.Buffer
	w.WriteByte('{')
	for _, k := range []string{"content", "structuredContent", "isError"} {
		if v, ok := fields[k]; ok {
			if w.Len() > 1 {
				w.WriteByte(',')
			}
			fmt.Fprintf(&w, "%q:%s", k, v)
		}
	}
	w.WriteByte('}')
	sz := size{Whole: w.Len(), Other: len(raw) - w.Len()}
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			sz.Text += len(t.Text)
		}
	}
	return sz, nil
}

// tap keeps the raw result of the last tools/call response. The session's
// calls are sequential, so there is one outstanding at a time.
type tap struct {
	mu   sync.Mutex
	want jsonrpc.ID
	last json.RawMessage
}

func (t *tap) take() json.RawMessage {
	t.mu.Lock()
	defer t.mu.Unlock()
	raw := t.last
	t.last = nil
	return raw
}

type tapTransport struct {
	mcp.Transport
	tap *tap
}

func (t *tapTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &tapConn{c, t.tap}, nil
}

type tapConn struct {
	mcp.Connection
	tap *tap
}

func (c *tapConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/call" {
		c.tap.mu.Lock()
		c.tap.want = req.ID
		c.tap.mu.Unlock()
	}
	return c.Connection.Write(ctx, msg)
}

func (c *tapConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.tap.mu.Lock()
		if resp.ID == c.tap.want {
			c.tap.last = resp.Result
		}
		c.tap.mu.Unlock()
	}
	return msg, err
}

var errNoPID = errors.New("no PID in start_process's answer")
