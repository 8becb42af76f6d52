package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/testkit"
)

// The file benchmarks time one files.read of 1 MiB, one files.write of
// 1 MiB (overwrite, atomic: temp file, fsync, rename, directory fsync) and
// one files.edit of one line in a 10 MiB file, over `commandcore mcp`
// stdio, each beside the shell tool that does the same in the same run
// (cat, cp). Run with -benchtime 30x; the edit also reports the agent's
// peak memory (VmHWM of the mcp process).

// fileMCP is an MCP stdio session whose server process is known, for its
// memory.
type fileMCP struct {
	*mcpClient
	cmd *exec.Cmd
}

func newFileMCP(b *testing.B) *fileMCP {
	b.Helper()
	cmd := exec.Command(ccBin, "mcp", "--state-dir", b.TempDir(), "--config-dir", b.TempDir())
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := testkit.Connect(ctx, "bench", testkit.Stdio(cmd), nil)
	if err != nil {
		b.Fatalf("connect to commandcore mcp: %v", err)
	}
	b.Cleanup(func() { s.Close() })
	return &fileMCP{mcpClient: &mcpClient{session: s}, cmd: cmd}
}

// hwmKiB is the server's peak resident memory so far.
func (c *fileMCP) hwmKiB(b *testing.B) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			n, _ := strconv.ParseFloat(f[1], 64)
			return n
		}
	}
	b.Fatal("no VmHWM")
	return 0
}

// textOf is n bytes of lines of text.
func textOf(n int) []byte {
	var buf bytes.Buffer
	for i := 0; buf.Len() < n; i++ {
		fmt.Fprintf(&buf, "line %07d of the benchmark file, some words to make it look like code\n", i)
	}
	return buf.Bytes()[:n]
}

func BenchmarkFilesRead1MiB(b *testing.B) {
	path := filepath.Join(b.TempDir(), "f.txt")
	if err := os.WriteFile(path, textOf(1<<20), 0o644); err != nil {
		b.Fatal(err)
	}
	c := newFileMCP(b)
	b.Run("files.read", func(b *testing.B) {
		measure(b, sampler{"files.read", func() (time.Duration, error) {
			var out struct{ Data string }
			t0 := time.Now()
			err := c.call("files.read", map[string]any{"path": path, "max_bytes": 1 << 20}, &out)
			if err == nil && len(out.Data) != 1<<20 {
				err = fmt.Errorf("read %d bytes", len(out.Data))
			}
			return time.Since(t0), err
		}})
	})
	b.Run("cat", func(b *testing.B) {
		measure(b, sampler{"cat", func() (time.Duration, error) {
			t0 := time.Now()
			out, err := exec.Command("cat", path).Output()
			if err == nil && len(out) != 1<<20 {
				err = fmt.Errorf("cat read %d bytes", len(out))
			}
			return time.Since(t0), err
		}})
	})
}

func BenchmarkFilesWrite1MiB(b *testing.B) {
	dir := b.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	content := textOf(1 << 20)
	if err := os.WriteFile(src, content, 0o644); err != nil {
		b.Fatal(err)
	}
	c := newFileMCP(b)
	b.Run("files.write", func(b *testing.B) {
		measure(b, sampler{"files.write", func() (time.Duration, error) {
			t0 := time.Now()
			err := c.call("files.write", map[string]any{"path": dst, "content": string(content), "mode": "overwrite"}, nil)
			return time.Since(t0), err
		}})
	})
	b.Run("cp", func(b *testing.B) {
		measure(b, sampler{"cp", func() (time.Duration, error) {
			t0 := time.Now()
			err := exec.Command("cp", src, dst).Run()
			return time.Since(t0), err
		}})
	})
}

func BenchmarkFilesEditOneLineOf10MiB(b *testing.B) {
	path := filepath.Join(b.TempDir(), "big.txt")
	if err := os.WriteFile(path, textOf(10<<20), 0o644); err != nil {
		b.Fatal(err)
	}
	c := newFileMCP(b)
	// Each edit toggles one line in the middle of the file.
	from, to := "line 0070000 of", "LINE 0070000 of"
	measure(b, sampler{"files.edit", func() (time.Duration, error) {
		t0 := time.Now()
		err := c.call("files.edit", map[string]any{"path": path, "edits": []map[string]any{{"old_text": from, "new_text": to}}}, nil)
		from, to = to, from
		return time.Since(t0), err
	}})
	b.ReportMetric(c.hwmKiB(b), "agent-VmHWM-KiB")
}
