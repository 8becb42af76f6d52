package search

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/owndirs"
)

// write creates root/rel with content, making parent directories.
func write(t testing.TB, root, rel, content string) string {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustSearch(t testing.TB, req Request) *Result {
	t.Helper()
	res, err := Search(context.Background(), req, nil)
	if err != nil {
		t.Fatalf("Search: %v", err)
	}
	return res
}

func paths(res *Result) []string {
	var out []string
	for _, m := range res.Matches {
		out = append(out, m.Path)
	}
	return out
}

type pl struct {
	Path string
	Line int
}

func pathLines(res *Result) []pl {
	var out []pl
	for _, m := range res.Matches {
		out = append(out, pl{m.Path, m.Line})
	}
	return out
}

// TestAcceptanceTree is the acceptance scenario in one tree:
// excluded directories, a large file, binary files, a symlink loop, an
// unreadable directory (simulated: see TestPermissionErrorRealUnprivileged
// for the real thing), a file name with a newline and a FIFO.
func TestAcceptanceTree(t *testing.T) {
	root := t.TempDir()
	const needle = "NEEDLE"
	write(t, root, "a.txt", "x\nhas NEEDLE here\ny\n")
	write(t, root, "sub/b.txt", "NEEDLE at start\nno\nend NEEDLE")
	write(t, root, "node_modules/c.txt", "NEEDLE excluded\n")
	write(t, root, "sub/deep/.git/d.txt", "NEEDLE excluded too\n")
	write(t, root, "sub/node_modules", "a file named like an excluded dir NEEDLE\n") // not a directory: searched
	write(t, root, "big.txt", strings.Repeat("filler\n", 3000)+"NEEDLE in a large file\n")
	write(t, root, "bin.dat", "NEEDLE\x00binary\n")
	write(t, root, "late-nul.txt", strings.Repeat("z", BinaryProbeBytes)+"\x00\nNEEDLE after the probe\n")
	write(t, root, "name\nwith newline.txt", "NEEDLE in a strange name\n")
	write(t, root, "locked/e.txt", "NEEDLE behind a permission error\n")
	if err := os.Symlink("..", filepath.Join(root, "sub", "loop")); err != nil { // sub/loop -> root
		t.Fatal(err)
	}
	if err := os.Symlink(root, filepath.Join(root, "sub", "deep", "abs-loop")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(root, "link-to-a.txt")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo-NEEDLE"), 0o644); err != nil {
		t.Fatal(err)
	}
	locked := filepath.Join(root, "locked")

	h := defaultHooks()
	realOpen := h.openDir
	h.openDir = func(dirfd int, name, path string) (int, error) {
		if path == locked {
			return -1, syscall.EACCES // what a non-root agent gets for a mode 000 directory
		}
		return realOpen(dirfd, name, path)
	}
	req := Request{Root: root, Text: needle, ExcludeDirs: []string{"node_modules", ".git"}, MaxFileBytes: 10000}
	done := make(chan struct{})
	var res *Result
	var err error
	go func() {
		defer close(done)
		res, err = search(context.Background(), req, h, nil)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("search did not return (FIFO or symlink loop?)")
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []pl{
		{root + "/a.txt", 2},
		{root + "/late-nul.txt", 2},
		{root + "/name\nwith newline.txt", 1},
		{root + "/sub/b.txt", 1},
		{root + "/sub/b.txt", 3},
		{root + "/sub/node_modules", 1},
	}
	if got := pathLines(res); !reflect.DeepEqual(got, want) {
		t.Fatalf("matches:\n got %v\nwant %v", got, want)
	}
	if res.Matches[0].Text != "has NEEDLE here" || res.Matches[4].Text != "end NEEDLE" {
		t.Errorf("texts: %q %q", res.Matches[0].Text, res.Matches[4].Text)
	}
	if res.SkippedBinary != 1 || res.SkippedLarge != 1 || res.PermissionErrors != 1 || res.OtherErrors != 0 {
		t.Errorf("counters: %+v", *res)
	}
	// root, sub, sub/deep (locked is counted as an error, excluded dirs not at all)
	if res.DirsScanned != 3 {
		t.Errorf("dirs_scanned = %d, want 3", res.DirsScanned)
	}
	// a, big, bin, late-nul, name\n, sub/b, sub/node_modules
	if res.FilesScanned != 7 {
		t.Errorf("files_scanned = %d, want 7", res.FilesScanned)
	}
	if res.Truncated || res.TimedOut {
		t.Errorf("truncated/timed_out: %+v", *res)
	}

	// Name-only: the large and binary files match by name; the FIFO and the
	// symlink are not regular files; excluded directories stay excluded.
	res, err = search(context.Background(), Request{Root: root, Name: "t", ExcludeDirs: []string{"node_modules", ".git"}, MaxFileBytes: 10000}, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantPaths := []string{root + "/a.txt", root + "/big.txt", root + "/bin.dat", root + "/late-nul.txt", root + "/name\nwith newline.txt", root + "/sub/b.txt"}
	if got := paths(res); !reflect.DeepEqual(got, wantPaths) {
		t.Fatalf("name matches:\n got %q\nwant %q", got, wantPaths)
	}
	for _, m := range res.Matches {
		if m.Line != 0 || m.Text != "" {
			t.Errorf("name-only match has line/text: %+v", m)
		}
	}
	if res.SkippedLarge != 0 || res.SkippedBinary != 0 {
		t.Errorf("name-only search read files: %+v", *res)
	}

	// A name with a newline is matched and reported exactly, also in JSON.
	res = mustSearch(t, Request{Root: root, Name: "e\nw"})
	if got := paths(res); !reflect.DeepEqual(got, []string{root + "/name\nwith newline.txt"}) {
		t.Fatalf("newline name: %q", got)
	}
	js, _ := json.Marshal(res.Matches[0])
	var back Match
	if err := json.Unmarshal(js, &back); err != nil || back.Path != root+"/name\nwith newline.txt" || back.PathBase64 != "" {
		t.Fatalf("JSON round trip: %s -> %+v %v", js, back, err)
	}
}

func TestNameAndText(t *testing.T) {
	root := t.TempDir()
	write(t, root, "x.go", "package x\nfunc main() {}\n")
	write(t, root, "x.txt", "func main() {}\n")
	write(t, root, "y.go", "nothing\n")
	res := mustSearch(t, Request{Root: root, Name: ".go", Text: "func main("})
	if got := pathLines(res); !reflect.DeepEqual(got, []pl{{root + "/x.go", 2}}) {
		t.Fatalf("got %v", got)
	}
	// name+text reads only the files whose name matches
	if res.FilesScanned != 3 {
		t.Errorf("files_scanned = %d", res.FilesScanned)
	}
}

func TestLiteralNotRegex(t *testing.T) {
	root := t.TempDir()
	write(t, root, "r.txt", "aXXb\na.*b\nab\n[a]\n")
	write(t, root, "a.b", "")
	write(t, root, "axb", "")
	res := mustSearch(t, Request{Root: root, Text: "a.*b"})
	if got := pathLines(res); !reflect.DeepEqual(got, []pl{{root + "/r.txt", 2}}) {
		t.Fatalf("text a.*b: %v", got)
	}
	res = mustSearch(t, Request{Root: root, Text: "[a]"})
	if got := pathLines(res); !reflect.DeepEqual(got, []pl{{root + "/r.txt", 4}}) {
		t.Fatalf("text [a]: %v", got)
	}
	res = mustSearch(t, Request{Root: root, Name: "a.b"})
	if got := paths(res); !reflect.DeepEqual(got, []string{root + "/a.b"}) {
		t.Fatalf("name a.b: %v", got)
	}
	res = mustSearch(t, Request{Root: root, Name: "*"})
	if len(res.Matches) != 0 {
		t.Fatalf("name *: %v", paths(res))
	}
}

func TestLargeFile(t *testing.T) {
	root := t.TempDir()
	write(t, root, "small.txt", "hit\n")
	write(t, root, "exact.txt", "hit\n"+strings.Repeat("-", 96)) // 100 bytes
	write(t, root, "large.txt", "hit\n"+strings.Repeat("-", 97)) // 101 bytes
	res := mustSearch(t, Request{Root: root, Text: "hit", MaxFileBytes: 100})
	if got := paths(res); !reflect.DeepEqual(got, []string{root + "/exact.txt", root + "/small.txt"}) {
		t.Fatalf("got %v", got)
	}
	if res.SkippedLarge != 1 {
		t.Errorf("skipped_large = %d", res.SkippedLarge)
	}
	res = mustSearch(t, Request{Root: root, Name: "large", MaxFileBytes: 100})
	if got := paths(res); !reflect.DeepEqual(got, []string{root + "/large.txt"}) || res.SkippedLarge != 0 {
		t.Fatalf("name match of a large file: %v %+v", got, *res)
	}
	// name+text on a large file: not read, counted, no match
	res = mustSearch(t, Request{Root: root, Name: "large", Text: "hit", MaxFileBytes: 100})
	if len(res.Matches) != 0 || res.SkippedLarge != 1 {
		t.Fatalf("name+text on a large file: %+v", *res)
	}
}

func TestBinary(t *testing.T) {
	root := t.TempDir()
	write(t, root, "nul-first.bin", "\x00hit\n")
	write(t, root, "nul-edge.bin", strings.Repeat("a", BinaryProbeBytes-1)+"\x00\nhit\n")
	write(t, root, "nul-after.txt", strings.Repeat("a", BinaryProbeBytes)+"\x00\nhit\n")
	write(t, root, "text.txt", "hit\n")
	for _, bs := range []int{0, 300, 5000} { // default, and buffers smaller than the probe
		res, err := search(context.Background(), Request{Root: root, Text: "hit"}, defaultHooks(), func(s *searcher) {
			if bs > 0 {
				s.bufSize = bs
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := paths(res); !reflect.DeepEqual(got, []string{root + "/nul-after.txt", root + "/text.txt"}) {
			t.Fatalf("buf %d: got %v", bs, got)
		}
		if res.SkippedBinary != 2 {
			t.Errorf("buf %d: skipped_binary = %d", bs, res.SkippedBinary)
		}
	}
}

// TestBinaryEarlyStop: a file whose search stops early (max_results
// reached) is still probed for NUL over the full probe length, also with a
// buffer smaller than the probe.
func TestBinaryEarlyStop(t *testing.T) {
	root := t.TempDir()
	write(t, root, "f.bin", strings.Repeat("hit\n", 5)+strings.Repeat("a", 5000)+"\x00")
	res, err := search(context.Background(), Request{Root: root, Text: "hit", MaxResults: 2}, defaultHooks(),
		func(s *searcher) { s.bufSize = 300 })
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Matches) != 0 || res.SkippedBinary != 1 || res.Truncated {
		t.Fatalf("got %v %+v", pathLines(res), *res)
	}
}

func TestSymlinkLoops(t *testing.T) {
	root := t.TempDir()
	write(t, root, "a/f.txt", "hit\n")
	os.Symlink("..", filepath.Join(root, "a", "up"))
	os.Symlink(root, filepath.Join(root, "a", "abs"))
	os.Symlink("self", filepath.Join(root, "self")) // ELOOP on open
	os.Symlink("b2", filepath.Join(root, "b1"))
	os.Symlink("b1", filepath.Join(root, "b2"))
	os.Symlink("a/f.txt", filepath.Join(root, "f-link.txt"))
	// The root itself may be a symlink (resolved once).
	rootLink := filepath.Join(t.TempDir(), "rootlink")
	os.Symlink(root, rootLink)
	for _, r := range []string{root, rootLink} {
		res := mustSearch(t, Request{Root: r, Text: "hit"})
		if got := pathLines(res); !reflect.DeepEqual(got, []pl{{r + "/a/f.txt", 1}}) {
			t.Fatalf("root %s: got %v", r, got)
		}
		if res.DirsScanned != 2 || res.FilesScanned != 1 || res.OtherErrors != 0 {
			t.Errorf("counters %+v", *res)
		}
	}
}

func TestFIFOAndSpecialFiles(t *testing.T) {
	root := t.TempDir()
	write(t, root, "z.txt", "hit\n")
	fifo := filepath.Join(root, "hit.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// Simulate the race where a listed regular file is a FIFO by the time
	// it is opened: the real open must not block, and it is not read.
	h := defaultHooks()
	realOpen := h.openFile
	h.openFile = func(dirfd int, name, path string) (int, error) {
		if strings.HasSuffix(path, "/z.txt") {
			return realOpen(dirfd, "hit.fifo", fifo)
		}
		return realOpen(dirfd, name, path)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := search(context.Background(), Request{Root: root, Text: "hit", Name: "z"}, h, nil)
		if err != nil || len(res.Matches) != 0 {
			t.Errorf("fifo search: %v %+v", err, res)
		}
		res, err = Search(context.Background(), Request{Root: root, Name: "hit"}, nil)
		if err != nil || len(res.Matches) != 0 {
			t.Errorf("fifo by name: %v %+v", err, res)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("search blocked on a FIFO")
	}
	res := mustSearch(t, Request{Root: root, Text: "hit"})
	if got := paths(res); !reflect.DeepEqual(got, []string{root + "/z.txt"}) {
		t.Fatalf("got %v", got)
	}
}

// TestPermissionErrorSimulated injects EACCES into opening a directory and
// a file. Real mode-000 directories cannot be used here when the tests run
// as root, because root bypasses permission bits; the real case is covered
// by TestPermissionErrorRealUnprivileged.
func TestPermissionErrorSimulated(t *testing.T) {
	root := t.TempDir()
	write(t, root, "ok.txt", "hit\n")
	write(t, root, "secret.txt", "hit\n")
	write(t, root, "closed/x.txt", "hit\n")
	h := defaultHooks()
	rd, rf := h.openDir, h.openFile
	h.openDir = func(dirfd int, name, p string) (int, error) {
		if name == "closed" {
			return -1, syscall.EACCES
		}
		return rd(dirfd, name, p)
	}
	h.openFile = func(dirfd int, name, p string) (int, error) {
		if name == "secret.txt" {
			return -1, syscall.EACCES
		}
		return rf(dirfd, name, p)
	}
	res, err := search(context.Background(), Request{Root: root, Text: "hit"}, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(res); !reflect.DeepEqual(got, []string{root + "/ok.txt"}) || res.PermissionErrors != 2 {
		t.Fatalf("got %v %+v", got, *res)
	}
	// The root itself unreadable is an error, not an empty result.
	h.openRoot = func(*owndirs.Set, string) (*os.File, error) { return nil, syscall.EACCES }
	if _, err := search(context.Background(), Request{Root: root, Text: "hit"}, h, nil); !errors.Is(err, ErrRootPermission) {
		t.Fatalf("root EACCES: %v", err)
	}
}

// TestPermissionErrorRealUnprivileged runs a search with real mode-000 and
// mode-0311 directories and a mode-000 file. As root it re-executes the test
// binary as nobody (setpriv), because root would read them anyway.
func TestPermissionErrorRealUnprivileged(t *testing.T) {
	if os.Getenv("SEARCH_CHILD_ROOT") != "" {
		res, err := Search(context.Background(), Request{Root: os.Getenv("SEARCH_CHILD_ROOT"), Text: "hit"}, nil)
		if err != nil {
			fmt.Printf("ERR %v\n", err)
			os.Exit(3)
		}
		js, _ := json.Marshal(res)
		fmt.Printf("RESULT %s\n", js)
		os.Exit(0)
	}
	base := t.TempDir()
	root := filepath.Join(base, "tree")
	write(t, root, "ok.txt", "hit\n")
	write(t, root, "closed/x.txt", "hit\n")
	write(t, root, "noread/y.txt", "hit\n")
	write(t, root, "secret.txt", "hit\n")
	chmod := func(p string, m os.FileMode) {
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
	}
	chmod(filepath.Join(root, "closed"), 0)
	chmod(filepath.Join(root, "noread"), 0o311) // traversable, not listable
	chmod(filepath.Join(root, "secret.txt"), 0)
	t.Cleanup(func() {
		os.Chmod(filepath.Join(root, "closed"), 0o755)
		os.Chmod(filepath.Join(root, "noread"), 0o755)
	})

	var res Result
	if os.Geteuid() != 0 {
		r := mustSearch(t, Request{Root: root, Text: "hit"})
		res = *r
	} else {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("running as root without setpriv: covered by TestPermissionErrorSimulated only")
		}
		// nobody must reach the tree and the test binary.
		for p := root; p != filepath.Dir(base); p = filepath.Dir(p) {
			chmod(p, 0o755)
		}
		chmod(filepath.Dir(base), 0o755)
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(base, "search.test")
		data, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
			bin, "-test.run=^TestPermissionErrorRealUnprivileged$")
		cmd.Env = append(os.Environ(), "SEARCH_CHILD_ROOT="+root)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		i := bytes.Index(out, []byte("RESULT "))
		if i < 0 {
			t.Fatalf("child output: %s", out)
		}
		line, _, _ := bytes.Cut(out[i+7:], []byte("\n"))
		if err := json.Unmarshal(line, &res); err != nil {
			t.Fatalf("child result %s: %v", line, err)
		}
	}
	if got := paths(&res); !reflect.DeepEqual(got, []string{root + "/ok.txt"}) {
		t.Fatalf("matches %v", got)
	}
	if res.PermissionErrors != 3 || res.OtherErrors != 0 {
		t.Fatalf("counters %+v", res)
	}
}

func TestTruncationDeterministic(t *testing.T) {
	root := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	total := 0
	for d := 0; d < 6; d++ {
		for f := 0; f < 8; f++ {
			var b strings.Builder
			for l := 0; l < 20; l++ {
				if rng.IntN(3) == 0 {
					b.WriteString("x hit x\n")
					total++
				} else {
					b.WriteString("nothing\n")
				}
			}
			name := fmt.Sprintf("d%d/f%d.txt", d, f)
			if f%3 == 0 {
				name = fmt.Sprintf("d%d.x/f%d.txt", d, f) // "d0.x" sorts after "d0/..."
			}
			write(t, root, name, b.String())
		}
	}
	full := mustSearch(t, Request{Root: root, Text: "hit", MaxResults: MaxMaxResults})
	if len(full.Matches) != total || full.Truncated {
		t.Fatalf("full: %d of %d, truncated %v", len(full.Matches), total, full.Truncated)
	}
	// The order is component-wise: check it against a sort of the split paths.
	sorted := slices.Clone(full.Matches)
	slices.SortStableFunc(sorted, func(a, b Match) int {
		if c := slices.Compare(strings.Split(a.Path, "/"), strings.Split(b.Path, "/")); c != 0 {
			return c
		}
		return a.Line - b.Line
	})
	if !reflect.DeepEqual(sorted, full.Matches) {
		t.Fatal("matches are not in component order")
	}
	for _, limit := range []int{1, 7, 50, total - 1, total} {
		for run := 0; run < 10; run++ {
			workers := 1 + run%4
			res, err := search(context.Background(), Request{Root: root, Text: "hit", MaxResults: limit}, defaultHooks(),
				func(s *searcher) { s.workers = workers })
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Matches, full.Matches[:limit]) {
				t.Fatalf("limit %d run %d: got %v", limit, run, pathLines(res))
			}
			if res.Truncated != (limit < total) {
				t.Fatalf("limit %d: truncated = %v", limit, res.Truncated)
			}
		}
	}
	// One file with more matches than max_results.
	write(t, root, "a/many.txt", strings.Repeat("hit\n", 100))
	res := mustSearch(t, Request{Root: root, Text: "hit", MaxResults: 10})
	if len(res.Matches) != 10 || !res.Truncated || res.Matches[9].Path != root+"/a/many.txt" || res.Matches[9].Line != 10 {
		t.Fatalf("many: %v", pathLines(res))
	}
	// Name-only truncation.
	res = mustSearch(t, Request{Root: root, Name: ".txt", MaxResults: 3})
	if got := paths(res); !res.Truncated || !reflect.DeepEqual(got, []string{root + "/a/many.txt", root + "/d0/f1.txt", root + "/d0/f2.txt"}) {
		t.Fatalf("name truncation: %v", got)
	}
}

func TestDeadline(t *testing.T) {
	root := t.TempDir()
	for d := 0; d < 40; d++ {
		for f := 0; f < 50; f++ {
			write(t, root, fmt.Sprintf("d%02d/f%02d.txt", d, f), "some text\nhit\n")
		}
	}
	// Make the walk slow enough that 1 ms certainly expires: each directory
	// open sleeps a little.
	h := defaultHooks()
	rd := h.openDir
	h.openDir = func(dirfd int, name, p string) (int, error) {
		time.Sleep(2 * time.Millisecond)
		return rd(dirfd, name, p)
	}
	start := time.Now()
	res, err := search(context.Background(), Request{Root: root, Text: "hit", TimeoutMS: 1}, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut {
		t.Fatalf("not timed out: %+v", *res)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("took %v", el)
	}
	if len(res.Matches) >= 2000 {
		t.Fatalf("complete results after a timeout: %d", len(res.Matches))
	}
	// Real file system, 1 ms: must return promptly; it usually times out.
	start = time.Now()
	res = mustSearch(t, Request{Root: root, Text: "hit", TimeoutMS: 1})
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("took %v", el)
	}
	t.Logf("1 ms real: timed_out=%v matches=%d files=%d", res.TimedOut, len(res.Matches), res.FilesScanned)
	// A completed search is not marked timed out.
	res = mustSearch(t, Request{Root: root, Text: "hit", MaxResults: 5000})
	if res.TimedOut || len(res.Matches) != 2000 {
		t.Fatalf("full: %v %d", res.TimedOut, len(res.Matches))
	}
	// A cancelled caller gets its error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Search(ctx, Request{Root: root, Text: "hit"}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestLongLinesAndText(t *testing.T) {
	root := t.TempDir()
	long := strings.Repeat("a", 3000) + "NEEDLE" + strings.Repeat("b", 3000)
	write(t, root, "long.txt", "first\n"+long+"\nNEEDLE again\n")
	write(t, root, "crlf.txt", "x\r\nNEEDLE\r\n")
	write(t, root, "bad-utf8.txt", "caf\xe9 NEEDLE \xff\xfe\n")
	write(t, root, "utf8-long.txt", strings.Repeat("é", 1000)+"NEEDLE"+strings.Repeat("ü", 1000)+"\n")
	for _, bs := range []int{0, 300, 1024} {
		res, err := search(context.Background(), Request{Root: root, Text: "NEEDLE"}, defaultHooks(), func(s *searcher) {
			if bs > 0 {
				s.bufSize = bs
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		got := pathLines(res)
		want := []pl{{root + "/bad-utf8.txt", 1}, {root + "/crlf.txt", 2}, {root + "/long.txt", 2}, {root + "/long.txt", 3}, {root + "/utf8-long.txt", 1}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("buf %d: %v", bs, got)
		}
		m := res.Matches
		if m[0].Text != "caf\uFFFD NEEDLE \uFFFD" || m[0].TextTruncated {
			t.Errorf("bad utf8 text %q", m[0].Text)
		}
		if m[1].Text != "NEEDLE" {
			t.Errorf("crlf text %q", m[1].Text)
		}
		for _, i := range []int{2, 4} {
			if !m[i].TextTruncated || len(m[i].Text) > MaxLineBytes || !strings.Contains(m[i].Text, "NEEDLE") || !utf8Valid(m[i].Text) {
				t.Errorf("buf %d: long line text (%d bytes, trunc %v) %q", bs, len(m[i].Text), m[i].TextTruncated, m[i].Text)
			}
		}
		if m[3].Text != "NEEDLE again" || m[3].TextTruncated {
			t.Errorf("after long line: %+v", m[3])
		}
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "?") == s }

func TestInvalidUTF8Path(t *testing.T) {
	root := t.TempDir()
	name := "bad\xffname.txt"
	write(t, root, name, "hit\n")
	res := mustSearch(t, Request{Root: root, Text: "hit"})
	if len(res.Matches) != 1 {
		t.Fatalf("got %v", paths(res))
	}
	m := res.Matches[0]
	raw, _ := base64.StdEncoding.DecodeString(m.PathBase64)
	if m.Path != root+"/bad\uFFFDname.txt" || string(raw) != root+"/"+name {
		t.Fatalf("path %q base64 %q", m.Path, raw)
	}
}

// TestMatchesReference compares the streaming line search with a naive
// implementation on random files, with buffers small enough that lines and
// matches straddle buffer boundaries and lines exceed the buffer.
func TestMatchesReference(t *testing.T) {
	root := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 11))
	alphabet := []byte("abcab\nc\n")
	var names []string
	for i := 0; i < 60; i++ {
		size := rng.IntN(3000)
		if i%10 == 0 {
			size = rng.IntN(40000)
		}
		b := make([]byte, size)
		for j := range b {
			b[j] = alphabet[rng.IntN(len(alphabet))]
		}
		if i%7 == 0 { // long lines
			for j := range b {
				if b[j] == '\n' && rng.IntN(4) != 0 {
					b[j] = 'a'
				}
			}
		}
		name := fmt.Sprintf("f%02d", i)
		names = append(names, name)
		write(t, root, name, string(b))
	}
	for _, needle := range []string{"a", "ab", "abc", "cab", "aaaa", "bcb", "abcabc", "c"} {
		var want []pl
		for _, name := range names {
			data, _ := os.ReadFile(filepath.Join(root, name))
			for i, l := range strings.Split(string(data), "\n") {
				if strings.Contains(l, needle) {
					want = append(want, pl{root + "/" + name, i + 1})
				}
			}
		}
		for _, bs := range []int{1, 300, 301, 4096, 0} {
			res, err := search(context.Background(), Request{Root: root, Text: needle, MaxResults: MaxMaxResults}, defaultHooks(),
				func(s *searcher) {
					if bs > 0 {
						s.bufSize = bs
					}
				})
			if err != nil {
				t.Fatal(err)
			}
			got := pathLines(res)
			w := want[:min(len(want), MaxMaxResults)]
			if !reflect.DeepEqual(got, w) || res.Truncated != (len(want) > MaxMaxResults) {
				t.Fatalf("needle %q buf %d: got %d matches, want %d (truncated %v)", needle, bs, len(got), len(want), res.Truncated)
			}
			for _, m := range res.Matches {
				if !strings.Contains(m.Text, needle) || len(m.Text) > MaxLineBytes {
					t.Fatalf("needle %q buf %d: text %q", needle, bs, m.Text)
				}
			}
		}
	}
}

func TestValidate(t *testing.T) {
	root := t.TempDir()
	cases := []struct {
		req  Request
		want string
	}{
		{Request{Text: "x"}, "root is required"},
		{Request{Root: "rel/dir", Text: "x"}, "root must be an absolute path"},
		{Request{Root: root}, "at least one of name and text is required"},
		{Request{Root: root, Name: "a/b"}, "must not contain '/'"},
		{Request{Root: root, Name: strings.Repeat("n", 256)}, "name must be at most"},
		{Request{Root: root, Text: "a\nb"}, "must not contain a newline"},
		{Request{Root: root, Text: strings.Repeat("t", MaxTextBytes+1)}, "text must be at most"},
		{Request{Root: root, Text: "x", ExcludeDirs: []string{"a/b"}}, "exclude_dirs"},
		{Request{Root: root, Text: "x", ExcludeDirs: []string{""}}, "exclude_dirs"},
		{Request{Root: root, Text: "x", MaxFileBytes: -1}, "max_file_bytes"},
		{Request{Root: root, Text: "x", MaxResults: MaxMaxResults + 1}, "max_results"},
		{Request{Root: root, Text: "x", MaxResults: -1}, "max_results"},
		{Request{Root: root, Text: "x", TimeoutMS: 60001}, "timeout_ms"},
	}
	for _, c := range cases {
		_, err := Search(context.Background(), c.req, nil)
		if !errcode.Is(err, errcode.InvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.req, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), root) {
			t.Errorf("error echoes the path: %v", err)
		}
	}
	file := write(t, root, "f", "")
	if _, err := Search(context.Background(), Request{Root: file, Text: "x"}, nil); !errors.Is(err, ErrRootNotDirectory) || !errcode.Is(err, errcode.InvalidArgument) {
		t.Errorf("file root: %v", err)
	}
	for _, missing := range []string{root + "/missing", file + "/below-a-file"} {
		if _, err := Search(context.Background(), Request{Root: missing, Text: "x"}, nil); !errors.Is(err, ErrRootNotFound) || !errcode.Is(err, errcode.NotFound) {
			t.Errorf("missing root: %v", err)
		}
	}
	if err := (&Request{Root: root, Name: "x"}).Validate(); err != nil {
		t.Errorf("valid: %v", err)
	}
	// The lead derives the MCP input schema from Request.
	schema, err := jsonschema.For[Request](nil)
	if err != nil {
		t.Fatalf("schema: %v", err)
	}
	if !reflect.DeepEqual(schema.Required, []string{"root"}) || len(schema.Properties) != 7 {
		t.Errorf("schema required %v, %d properties", schema.Required, len(schema.Properties))
	}
	// Strict decoding by the lead is by json tags: check the names.
	js, _ := json.Marshal(Request{Root: "/r", Name: "n", Text: "t", ExcludeDirs: []string{"e"}, MaxFileBytes: 1, MaxResults: 2, TimeoutMS: 3})
	if string(js) != `{"root":"/r","name":"n","text":"t","exclude_dirs":["e"],"max_file_bytes":1,"max_results":2,"timeout_ms":3}` {
		t.Errorf("json: %s", js)
	}
}

func TestRootSlash(t *testing.T) {
	if testing.Short() {
		t.Skip("walks /")
	}
	// "/" joins without a double slash; keep it cheap with exclusions and a
	// name that exists in a known place.
	res := mustSearch(t, Request{Root: "/", Name: "passwd", ExcludeDirs: []string{"proc", "sys", "dev", "tmp", "run", "work", "home", "root", "var", "usr"}, TimeoutMS: 5000})
	for _, p := range paths(res) {
		if strings.Contains(p, "//") {
			t.Fatalf("path %q", p)
		}
	}
	if !slices.Contains(paths(res), "/etc/passwd") && !res.TimedOut {
		t.Errorf("/etc/passwd not found: %v", paths(res))
	}
}

func TestComparePath(t *testing.T) {
	ordered := []string{"/r/a", "/r/a/z", "/r/a.txt", "/r/a0", "/r/b", "/r/b\n", "/r/b\xff"}
	for i := range ordered {
		for j := range ordered {
			if got, want := comparePath(ordered[i], ordered[j]), cmpInt(i, j); got != want {
				t.Errorf("compare(%q, %q) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// The agent's own directories are skipped wherever the walk meets them,
// also through another name, and a root inside them is refused.
func TestSearchSkipsTheAgentsOwnDirectories(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "home", ".local", "state", "commandcore")
	config := filepath.Join(root, "home", ".config", "commandcore")
	own, err := owndirs.New(state, config)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(config, "identity.json"), []byte(`{"token":"`+secret+`"}`), 0o600)
	os.MkdirAll(filepath.Join(state, "jobs", "j"), 0o700)
	os.WriteFile(filepath.Join(state, "jobs", "j", "stdout.cap"), []byte(secret+"\n"), 0o600)
	os.WriteFile(filepath.Join(root, "home", "notes.txt"), []byte(secret+"\n"), 0o600)

	res, err := Search(context.Background(), Request{Root: root, Text: secret}, own)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Matches) != 1 || res.Matches[0].Path != filepath.Join(root, "home", "notes.txt") {
		t.Fatalf("matches %+v, want only notes.txt", res.Matches)
	}
	res, err = Search(context.Background(), Request{Root: root, Name: "identity"}, own)
	if err != nil || len(res.Matches) != 0 {
		t.Fatalf("name search found %+v, %v", res.Matches, err)
	}
	for _, r := range []string{config, filepath.Join(state, "jobs"), filepath.Join(root, "home", ".config", "commandcore", ".")} {
		if _, err := Search(context.Background(), Request{Root: r, Text: secret}, own); errcode.From(err).Code != errcode.PermissionDenied {
			t.Errorf("root %s: %v, want permission_denied", r, err)
		}
	}
	// A symlinked root into the config directory is refused too.
	link := filepath.Join(root, "cfg")
	os.Symlink(config, link)
	if _, err := Search(context.Background(), Request{Root: link, Text: secret}, own); errcode.From(err).Code != errcode.PermissionDenied {
		t.Errorf("symlinked root: %v", err)
	}
	// Without the set, the same search finds all three: the test can fail.
	res, _ = Search(context.Background(), Request{Root: root, Text: secret}, nil)
	if len(res.Matches) != 3 {
		t.Fatalf("unprotected search found %d", len(res.Matches))
	}
}

const secret = "ccd_secret_token_marker"

// configWithSecret is an agent's config directory whose identity holds
// content, and its set.
func configWithSecret(t *testing.T, content string) (string, *owndirs.Set) {
	t.Helper()
	config := filepath.Join(t.TempDir(), "config")
	own, err := owndirs.New(config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(config, "identity.json"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return config, own
}

// TestSwapMidWalkLeadsNowhere: a directory already listed that is swapped
// for a symlink into the agent's config directory before its files are
// opened leads the walk nowhere: the files are opened in the directory
// that was listed, never by their path afresh.
func TestSwapMidWalkLeadsNowhere(t *testing.T) {
	root := t.TempDir()
	config, own := configWithSecret(t, secret+" in the identity\n")
	write(t, root, "a/identity.json", secret+" decoy\n")
	write(t, root, "a/sub/x.txt", secret+" below\n")
	a := filepath.Join(root, "a")
	h := defaultHooks()
	rf := h.openFile
	var once sync.Once
	swap := func() {
		once.Do(func() {
			if err := os.Rename(a, a+".old"); err != nil {
				t.Error(err)
			}
			if err := os.Symlink(config, a); err != nil {
				t.Error(err)
			}
		})
	}
	h.openFile = func(dirfd int, name, path string) (int, error) {
		if path == filepath.Join(a, "identity.json") {
			swap()
		}
		return rf(dirfd, name, path)
	}
	res, err := search(context.Background(), Request{Root: root, Text: secret}, h, func(s *searcher) { s.workers, s.own = 1, own })
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res.Matches {
		if strings.Contains(m.Text, "in the identity") {
			t.Fatalf("the swap led the search into the config directory: %+v", m)
		}
	}
	if len(res.Matches) != 2 {
		t.Errorf("matches %+v, want the decoy and the file below, from the directory listed", res.Matches)
	}
}

// TestSearchSkipsProcessesAndOwnFilesOtherNames: a search of /proc enters
// no process's directory, and a hard link elsewhere to a file of the
// agent's is not read.
func TestSearchSkipsProcessesAndOwnFilesOtherNames(t *testing.T) {
	root := t.TempDir()
	config, own := configWithSecret(t, secret+"\n")
	if err := os.Link(filepath.Join(config, "identity.json"), filepath.Join(root, "copy.json")); err != nil {
		t.Fatal(err)
	}
	write(t, root, "plain.txt", secret+"\n")
	res, err := Search(context.Background(), Request{Root: root, Text: secret}, own)
	if err != nil || len(res.Matches) != 1 || res.Matches[0].Path != filepath.Join(root, "plain.txt") {
		t.Fatalf("matches %+v (%v), want only plain.txt", res.Matches, err)
	}
	// The environment of this process is where the marker is.
	t.Setenv("SEARCH_PROC_MARKER", secret)
	res, err = Search(context.Background(), Request{Root: "/proc", Name: "environ", TimeoutMS: 20000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res.Matches {
		t.Errorf("a process file was found: %s", m.Path)
	}
	for _, r := range []string{"/proc/self", "/proc/" + strconv.Itoa(os.Getpid()), "/dev/fd"} {
		if _, err := Search(context.Background(), Request{Root: r, Text: secret}, nil); errcode.From(err).Code != errcode.PermissionDenied {
			t.Errorf("root %s: %v, want permission_denied", r, err)
		}
	}
}
