// Package searchbench measures files.search's literal text search over a
// large real tree against ripgrep and GNU grep on the same tree. These are
// measurements, not assertions: numbers are reported as custom metrics and
// nothing fails on a missed target.
//
//	go test ./bench/search -run '^$' -bench . -benchtime 15x
//
// Each benchmark iteration is one round that runs every tool once, in an
// order that rotates per round, so that load from elsewhere on the machine
// falls on all tools alike; each tool's median over the rounds is reported
// (median-ms, and cpu-ms = user+system CPU). A warm-up round first fills the
// page cache. Environment:
//
//	SEARCH_BENCH_ROOT  tree to search (default: $(go env GOROOT)/src)
//	SEARCH_BENCH_TEXT  literal to search for (default: "func main(")
//
// files.search runs in process (the Search function: no MCP or JSON
// encoding); rg and grep run as child processes with LC_ALL=C, their output
// read through a pipe and counted (not /dev/null, which both detect and
// short-circuit).
package searchbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/search"
)

type tool struct {
	name string
	run  func() (matches int, cpu time.Duration, err error)
}

func benchSetup(b *testing.B) (root, text string) {
	root = os.Getenv("SEARCH_BENCH_ROOT")
	if root == "" {
		root = filepath.Join(runtime.GOROOT(), "src")
		if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
			root = filepath.Join(string(trimNL(out)), "src")
		}
	}
	text = os.Getenv("SEARCH_BENCH_TEXT")
	if text == "" {
		text = "func main("
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		b.Skipf("no tree at %s", root)
	}
	return root, text
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func commandcore(root, text string) tool {
	return tool{name: "commandcore", run: func() (int, time.Duration, error) {
		c0 := selfCPU()
		res, err := search.Search(context.Background(), search.Request{
			Root: root, Text: text, MaxResults: search.MaxMaxResults, TimeoutMS: 60000}, nil)
		cpu := selfCPU() - c0
		if err != nil {
			return 0, cpu, err
		}
		if res.Truncated || res.TimedOut {
			return 0, cpu, fmt.Errorf("truncated=%v timed_out=%v: not comparable", res.Truncated, res.TimedOut)
		}
		return len(res.Matches), cpu, nil
	}}
}

// external runs a command and counts its output lines.
func external(name string, argv ...string) tool {
	return tool{name: name, run: func() (int, time.Duration, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		out, err := cmd.StdoutPipe()
		if err != nil {
			return 0, 0, err
		}
		if err := cmd.Start(); err != nil {
			return 0, 0, err
		}
		lines := 0
		r := bufio.NewReaderSize(out, 64<<10)
		for {
			chunk, err := r.ReadSlice('\n')
			if len(chunk) > 0 && chunk[len(chunk)-1] == '\n' {
				lines++
			}
			if err == io.EOF {
				break
			}
			if err != nil && err != bufio.ErrBufferFull {
				return 0, 0, err
			}
		}
		err = cmd.Wait()
		cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		// grep exits 1 for "no match" and 2 for errors such as unreadable
		// files; count output either way.
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() <= 2 {
			err = nil
		}
		return lines, cpu, err
	}}
}

func tools(b *testing.B, root, text string) []tool {
	ts := []tool{commandcore(root, text)}
	if rg, err := exec.LookPath("rg"); err == nil {
		// Same semantics as files.search: no ignore files, hidden files
		// included, symlinks not followed, binary files skipped.
		ts = append(ts, external("rg-equivalent", rg, "-F", "-n", "--no-ignore", "--hidden", "--no-messages", "--", text, root))
		ts = append(ts, external("rg-default", rg, "-F", "-n", "--", text, root))
	} else {
		b.Log("rg is not installed: no ripgrep comparison")
	}
	if grep, err := exec.LookPath("grep"); err == nil {
		ts = append(ts, external("grep-equivalent", grep, "-r", "-F", "-n", "-I", "--", text, root))
		ts = append(ts, external("grep-rF", grep, "-r", "-F", "--", text, root))
	}
	return ts
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkLiteralSearch reports, for each tool, its median wall time and
// CPU time per search, its match count, and commandcore's ratios to rg
// (target <= 1.5) and grep (target < 1).
func BenchmarkLiteralSearch(b *testing.B) {
	root, text := benchSetup(b)
	ts := tools(b, root, text)
	wall := make([][]time.Duration, len(ts))
	cpu := make([][]time.Duration, len(ts))
	counts := make([]int, len(ts))
	for i, t := range ts { // warm-up: page cache, and the match counts
		n, _, err := t.run()
		if err != nil {
			b.Fatalf("%s: %v", t.name, err)
		}
		counts[i] = n
	}
	b.ResetTimer()
	for round := 0; b.Loop(); round++ {
		for k := range ts {
			i := (k + round) % len(ts)
			start := time.Now()
			n, c, err := ts[i].run()
			wall[i] = append(wall[i], time.Since(start))
			cpu[i] = append(cpu[i], c)
			if err != nil {
				b.Fatalf("%s: %v", ts[i].name, err)
			}
			if n != counts[i] {
				b.Logf("%s: %d matches, warm-up had %d", ts[i].name, n, counts[i])
			}
		}
	}
	b.StopTimer()
	ours := median(wall[0])
	b.Logf("tree %s, text %q, GOMAXPROCS %d, %d rounds", root, text, runtime.GOMAXPROCS(0), len(wall[0]))
	for i, t := range ts {
		m := median(wall[i])
		b.ReportMetric(ms(m), t.name+"-median-ms")
		b.ReportMetric(ms(median(cpu[i])), t.name+"-cpu-ms")
		b.ReportMetric(float64(counts[i]), t.name+"-lines")
		b.Logf("%-16s median %7.1f ms  (min %7.1f, max %7.1f)  cpu %7.1f ms  output lines %d  commandcore/this %.2f",
			t.name, ms(m), ms(slices.Min(wall[i])), ms(slices.Max(wall[i])), ms(median(cpu[i])), counts[i], float64(ours)/float64(m))
	}
}

// BenchmarkSearchOnly is files.search alone, for profiling:
//
//	go test ./bench/search -run '^$' -bench SearchOnly -benchtime 10x -cpuprofile cpu.out
func BenchmarkSearchOnly(b *testing.B) {
	root, text := benchSetup(b)
	t := commandcore(root, text)
	if _, _, err := t.run(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := t.run(); err != nil {
			b.Fatal(err)
		}
	}
}
