package run

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/testkit"
)

func opts(progress func(context.Context, Chunk) error) Options {
	return Options{Shell: "/bin/sh", BaseEnv: os.Environ(), Progress: progress}
}

// collector reassembles live output and checks chunk bounds and offsets.
type collector struct {
	t      *testing.T
	mu     sync.Mutex
	chunks int
	out    map[string]*bytes.Buffer
}

func newCollector(t *testing.T) *collector {
	return &collector{t: t, out: map[string]*bytes.Buffer{Stdout: {}, Stderr: {}}}
}

func (c *collector) progress(_ context.Context, ch Chunk) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.chunks++
	if len(ch.Data) == 0 || len(ch.Data) > limits.LiveChunkBytes {
		c.t.Errorf("chunk of %d bytes", len(ch.Data))
	}
	b := c.out[ch.Stream]
	if b == nil {
		c.t.Fatalf("unknown stream %q", ch.Stream)
	}
	if ch.Offset != int64(b.Len()) {
		c.t.Errorf("%s chunk at offset %d, want %d", ch.Stream, ch.Offset, b.Len())
	}
	b.Write(ch.Data)
	return nil
}

func decode(t *testing.T, s StreamOutput) []byte {
	t.Helper()
	switch s.Encoding {
	case "utf-8":
		return []byte(s.Data)
	case "base64":
		b, err := base64.StdEncoding.DecodeString(s.Data)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Fatalf("encoding %q", s.Encoding)
	return nil
}

func seq(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.Bytes()[:n]
}

func TestChunksReassemble(t *testing.T) {
	dir := t.TempDir()
	outData, errData := seq(300_000), seq(123_457)
	os.WriteFile(dir+"/o", outData, 0o600)
	os.WriteFile(dir+"/e", errData, 0o600)
	c := newCollector(t)
	res, err := Run(context.Background(), Request{Command: "cat o; cat e >&2; cat o", Cwd: dir, MaxBytes: limits.RunOutputCapBytes}, opts(c.progress))
	if err != nil {
		t.Fatal(err)
	}
	wantOut := append(append([]byte(nil), outData...), outData...)
	if !bytes.Equal(c.out[Stdout].Bytes(), wantOut) || !bytes.Equal(c.out[Stderr].Bytes(), errData) {
		t.Fatalf("live output does not reassemble: %d/%d bytes", c.out[Stdout].Len(), c.out[Stderr].Len())
	}
	if c.chunks < (len(wantOut)+len(errData))/limits.LiveChunkBytes {
		t.Errorf("only %d chunks", c.chunks)
	}
	if !bytes.Equal(decode(t, res.Stdout), wantOut) || !bytes.Equal(decode(t, res.Stderr), errData) {
		t.Fatal("retained output differs")
	}
	oc := res.OutputCapture
	total := int64(len(wantOut) + len(errData))
	if oc.ObservedBytes != total || oc.RetainedBytes != total || oc.Truncated || !oc.TransportComplete ||
		oc.LimitBytes != limits.RunOutputCapBytes {
		t.Fatalf("capture %+v", oc)
	}
	if res.ExitCode == nil || *res.ExitCode != 0 || res.Signal != "" || res.Cancelled || res.TimedOut {
		t.Fatalf("result %+v", res)
	}
}

// kept returns what a stream's result holds of want: all of it, or its
// bytes before the gap and after it.
func kept(t *testing.T, s StreamOutput, want []byte) []byte {
	t.Helper()
	if s.Gap == nil {
		if s.Truncated {
			t.Errorf("truncated without a gap: %+v", s)
		}
		return want
	}
	if !s.Truncated || s.Gap.From > s.Gap.To || s.Gap.To > int64(len(want)) {
		t.Fatalf("gap %+v of %d bytes, truncated %v", s.Gap, len(want), s.Truncated)
	}
	return append(append([]byte(nil), want[:s.Gap.From]...), want[s.Gap.To:]...)
}

// TestHeadAndTail: max_bytes keeps the first half of the output and the
// last half; the middle is counted, not kept, and the result says where
// it was.
func TestHeadAndTail(t *testing.T) {
	dir := t.TempDir()
	out := seq(300_000)
	os.WriteFile(dir+"/o", out, 0o600)
	res, err := Run(context.Background(), Request{Command: "cat o", Cwd: dir, MaxBytes: 100_000}, opts(nil))
	if err != nil {
		t.Fatal(err)
	}
	if g := res.Stdout.Gap; g == nil || *g != (jobs.Gap{From: 50_000, To: 250_000}) || !res.Stdout.Truncated {
		t.Fatalf("stdout gap %v, truncated %v", g, res.Stdout.Truncated)
	}
	if got := decode(t, res.Stdout); !bytes.Equal(got, kept(t, res.Stdout, out)) {
		t.Fatalf("stdout keeps %d bytes that are not its head and tail", len(got))
	}
	oc := res.OutputCapture
	if oc.LimitBytes != 100_000 || oc.ObservedBytes != 300_000 || oc.RetainedBytes != 100_000 || !oc.Truncated {
		t.Fatalf("capture %+v", oc)
	}
	if res.Stderr.Gap != nil || res.Stderr.Truncated || res.Stderr.Data != "" {
		t.Fatalf("stderr %+v", res.Stderr)
	}
}

// TestDefaultKeeps64KiB: without max_bytes, a command that prints more
// keeps 64 KiB, its first lines and its last.
func TestDefaultKeeps64KiB(t *testing.T) {
	res, err := Run(context.Background(), Request{Command: "seq 1 200000"}, opts(nil))
	if err != nil {
		t.Fatal(err)
	}
	oc := res.OutputCapture
	if oc.LimitBytes != limits.RunOutputDefaultBytes || oc.RetainedBytes != limits.RunOutputDefaultBytes || oc.ObservedBytes != 1_288_895 || !oc.Truncated {
		t.Fatalf("capture %+v", oc)
	}
	if !strings.HasPrefix(res.Stdout.Data, "1\n2\n3\n") || !strings.HasSuffix(res.Stdout.Data, "\n199999\n200000\n") {
		t.Fatalf("stdout does not keep the first and last lines")
	}
}

// TestBothStreamsShareTheBudget: both streams together keep max_bytes,
// each its head and tail, and a short stream is kept whole, whichever
// order the scheduler read them in.
func TestBothStreamsShareTheBudget(t *testing.T) {
	dir := t.TempDir()
	out, big, errOut := seq(70_000), seq(300_000), bytes.Repeat([]byte("e\n"), 30_000)
	os.WriteFile(dir+"/o", out, 0o600)
	os.WriteFile(dir+"/big", big, 0o600)
	os.WriteFile(dir+"/e", errOut, 0o600)
	for _, tc := range []struct {
		command         string
		stdout, stderr  []byte
		stderrKeptWhole bool
	}{
		{"cat e >&2; cat o; exit 3", out, errOut, false},
		{"printf err >&2; cat big; exit 3", big, []byte("err"), true},
	} {
		res, err := Run(context.Background(), Request{Command: tc.command, Cwd: dir, MaxBytes: 100_000}, opts(nil))
		if err != nil {
			t.Fatal(err)
		}
		oc := res.OutputCapture
		observed := int64(len(tc.stdout) + len(tc.stderr))
		if oc.LimitBytes != 100_000 || oc.ObservedBytes != observed || oc.RetainedBytes != 100_000 || !oc.Truncated || oc.TransportComplete {
			t.Fatalf("%s: capture %+v", tc.command, oc)
		}
		outKept, errKept := decode(t, res.Stdout), decode(t, res.Stderr)
		if !bytes.Equal(outKept, kept(t, res.Stdout, tc.stdout)) || !bytes.Equal(errKept, kept(t, res.Stderr, tc.stderr)) {
			t.Fatalf("%s: a stream keeps bytes that are not its head and tail", tc.command)
		}
		if len(outKept)+len(errKept) != 100_000 {
			t.Errorf("%s: kept stdout %d + stderr %d bytes", tc.command, len(outKept), len(errKept))
		}
		if tc.stderrKeptWhole && (res.Stderr.Gap != nil || !bytes.Equal(errKept, tc.stderr)) {
			t.Errorf("%s: a short stderr kept %q, gap %v", tc.command, errKept, res.Stderr.Gap)
		}
		if res.ExitCode == nil || *res.ExitCode != 3 {
			t.Errorf("%s: exit code %v", tc.command, res.ExitCode)
		}
	}
}

// TestTruncationKeepsText: a cut through a character drops its bytes on
// both sides of the gap, so valid text stays text.
func TestTruncationKeepsText(t *testing.T) {
	for _, tc := range []struct {
		printf, data string
		gap          jobs.Gap
	}{
		// The tail begins inside the euro sign.
		{`abcdefghi\342\202\254xyz`, "abcdexyz", jobs.Gap{From: 5, To: 12}},
		// The head ends inside it.
		{`abcd\342\202\254fghijklmnop`, "abcdlmnop", jobs.Gap{From: 4, To: 13}},
	} {
		res, err := Run(context.Background(), Request{Command: "printf '" + tc.printf + "'", MaxBytes: 10}, opts(nil))
		if err != nil {
			t.Fatal(err)
		}
		oc := res.OutputCapture
		if res.Stdout.Encoding != "utf-8" || res.Stdout.Data != tc.data || res.Stdout.Gap == nil || *res.Stdout.Gap != tc.gap ||
			oc.RetainedBytes != int64(len(tc.data)) || oc.ObservedBytes != tc.gap.To+int64(len(tc.data))-tc.gap.From || !oc.Truncated {
			t.Errorf("%s: %+v %v %+v", tc.printf, res.Stdout, res.Stdout.Gap, oc)
		}
	}
}

func TestBackpressure(t *testing.T) {
	const total = 10 << 20
	var maxQueued atomic.Int64
	var maxAhead atomic.Int64
	var delivered atomic.Int64
	testOnEnqueue = func(queued int, read int64) {
		if int64(queued) > maxQueued.Load() {
			maxQueued.Store(int64(queued))
		}
		if ahead := read - delivered.Load(); ahead > maxAhead.Load() {
			maxAhead.Store(ahead)
		}
	}
	defer func() { testOnEnqueue = nil }()
	calls := 0
	slow := func(_ context.Context, c Chunk) error {
		calls++
		if calls%8 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
		delivered.Add(int64(len(c.Data)))
		return nil
	}
	res, err := Run(context.Background(), Request{Command: "head -c " + strconv.Itoa(total) + " /dev/zero"}, opts(slow))
	if err != nil {
		t.Fatal(err)
	}
	if maxQueued.Load() > limits.LiveQueueFrames {
		t.Errorf("queue reached %d frames", maxQueued.Load())
	}
	if maxQueued.Load() < limits.LiveQueueFrames/2 {
		t.Errorf("the slow sender never backed the queue up (max %d frames)", maxQueued.Load())
	}
	// Readers never run ahead of delivery by more than the queue, the frame
	// in the sender's hands and one frame per reader: the rest waits in the
	// command's pipe.
	if bound := int64(limits.LiveQueueFrames+3) * limits.LiveChunkBytes; maxAhead.Load() > bound {
		t.Errorf("readers ran %d bytes ahead of delivery (bound %d)", maxAhead.Load(), bound)
	}
	oc := res.OutputCapture
	if oc.ObservedBytes != total || oc.RetainedBytes != limits.RunOutputDefaultBytes || !oc.Truncated || !oc.TransportComplete {
		t.Fatalf("capture %+v", oc)
	}
	if delivered.Load() != total {
		t.Fatalf("delivered %d", delivered.Load())
	}
}

func TestTransportFailureCancels(t *testing.T) {
	var calls atomic.Int32
	fail := func(context.Context, Chunk) error {
		calls.Add(1)
		return errors.New("link lost")
	}
	began := time.Now()
	res, err := Run(context.Background(), Request{Command: "while :; do echo spam; done"}, opts(fail))
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(began) > 10*time.Second {
		t.Error("command not cancelled promptly")
	}
	if calls.Load() != 1 {
		t.Errorf("Progress called %d times after failing", calls.Load())
	}
	if res.OutputCapture.TransportComplete || !res.Cancelled || res.Signal == "" {
		t.Fatalf("%+v", res)
	}
}

// procGone reports whether pid no longer runs (gone or a zombie).
func procGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] == "Z"
}

func TestCancelKillsGroupIgnoringTERM(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var line []byte
	progress := func(_ context.Context, c Chunk) error {
		mu.Lock()
		defer mu.Unlock()
		line = append(line, c.Data...)
		if bytes.IndexByte(line, '\n') >= 0 {
			cancel()
		}
		return nil
	}
	began := time.Now()
	res, err := Run(ctx, Request{Command: "trap '' TERM; sleep 60 & echo $!; wait"}, opts(progress))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	if took > 10*time.Second || took < limits.StopEscalation/2 {
		t.Errorf("took %v", took)
	}
	if !res.Cancelled || res.TimedOut || res.Signal != "SIGKILL" || res.ExitCode != nil || res.OutputCapture.TransportComplete {
		t.Fatalf("%+v", res)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(line)))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if !procGone(pid) {
			return fmt.Errorf("the background sleep (pid %d) survived", pid)
		}
		return nil
	})
}

func TestTimeout(t *testing.T) {
	began := time.Now()
	res, err := Run(context.Background(), Request{Command: "echo hi; sleep 60", TimeoutMS: 200}, opts(nil))
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(began) > 10*time.Second {
		t.Error("timeout not applied")
	}
	if !res.TimedOut || res.Cancelled || res.Signal != "SIGTERM" || res.Stdout.Data != "hi\n" {
		t.Fatalf("%+v", res)
	}
}

func TestTimeoutWithLiveOutputIsComplete(t *testing.T) {
	c := newCollector(t)
	res, err := Run(context.Background(), Request{Command: "echo hi; exec sleep 60", TimeoutMS: 200}, opts(c.progress))
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || !res.OutputCapture.TransportComplete || c.out[Stdout].String() != "hi\n" {
		t.Fatalf("%+v", res)
	}
}

func TestBinaryOutputBase64(t *testing.T) {
	c := newCollector(t)
	res, err := Run(context.Background(), Request{Command: `printf '\377\000\376ok' >&2`}, opts(c.progress))
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0xff, 0, 0xfe, 'o', 'k'}
	if res.Stderr.Encoding != "base64" || !bytes.Equal(decode(t, res.Stderr), want) || !bytes.Equal(c.out[Stderr].Bytes(), want) {
		t.Fatalf("%+v", res.Stderr)
	}
	if res.Stdout.Encoding != "utf-8" || res.Stdout.Data != "" {
		t.Fatalf("%+v", res.Stdout)
	}
	data, enc := EncodeChunk(Chunk{Data: want})
	if enc != "base64" || data != base64.StdEncoding.EncodeToString(want) {
		t.Fatal(data, enc)
	}
}

func TestSplitRuneStaysText(t *testing.T) {
	// A slow writer splits a euro sign across two writes; both chunks
	// stay text because the reader holds the partial character back.
	var mu sync.Mutex
	var encs []string
	progress := func(_ context.Context, c Chunk) error {
		mu.Lock()
		defer mu.Unlock()
		_, enc := EncodeChunk(c)
		encs = append(encs, enc)
		return nil
	}
	res, err := Run(context.Background(), Request{Command: `printf 'a\342'; sleep 0.2; printf '\202\254b'`}, opts(progress))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range encs {
		if e != "utf-8" {
			t.Errorf("chunk encodings %v", encs)
		}
	}
	if res.Stdout.Data != "a€b" {
		t.Fatalf("%+v", res.Stdout)
	}
}

func TestExitAndSignal(t *testing.T) {
	res, err := Run(context.Background(), Request{Command: "exit 7"}, opts(nil))
	if err != nil || res.ExitCode == nil || *res.ExitCode != 7 || res.Signal != "" {
		t.Fatalf("%v %+v", err, res)
	}
	res, err = Run(context.Background(), Request{Command: "kill -9 $$"}, opts(nil))
	if err != nil || res.ExitCode != nil || res.Signal != "SIGKILL" || res.Cancelled {
		t.Fatalf("%v %+v", err, res)
	}
}

func TestEnvAndCwd(t *testing.T) {
	dir := t.TempDir()
	res, err := Run(context.Background(), Request{Command: `printf '%s %s' "$FOO" "$PWD"`, Cwd: dir, Env: map[string]string{"FOO": "bar"}}, opts(nil))
	if err != nil || res.Stdout.Data != "bar "+dir {
		t.Fatalf("%v %+v", err, res)
	}
}

func TestInvalidInput(t *testing.T) {
	secret := "s3cr3t-value"
	for _, req := range []Request{
		{Command: ""},
		{Command: "   "},
		{Command: "echo " + secret + "\x00"},
		{Command: "echo", Cwd: "relative/" + secret},
		{Command: "echo", Cwd: "/nonexistent/" + secret},
		{Command: "echo", Env: map[string]string{"A=" + secret: "x"}},
		{Command: "echo", Env: map[string]string{"A": secret + "\x00"}},
		{Command: "echo", TimeoutMS: -1},
		{Command: "echo", TimeoutMS: int(limits.RunTimeoutMax.Milliseconds()) + 1},
		{Command: "echo", MaxBytes: -1},
		{Command: "echo", MaxBytes: limits.RunOutputCapBytes + 1},
	} {
		res, err := Run(context.Background(), req, opts(nil))
		if res != nil || !errcode.Is(err, errcode.InvalidArgument) {
			t.Errorf("%q: %v", req.Command, err)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "relative") {
			t.Errorf("message echoes input: %v", err)
		}
	}
}

func TestEscapedHolderDoesNotHang(t *testing.T) {
	// A process that leaves the group keeps stdout open: Run still ends,
	// and it does not claim the live output was complete.
	c := newCollector(t)
	began := time.Now()
	res, err := Run(context.Background(), Request{Command: "setsid sleep 30 & echo $!; wait", TimeoutMS: 100}, opts(c.progress))
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(c.out[Stdout].String())); err == nil {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if time.Since(began) > 15*time.Second {
		t.Error("Run hung on a pipe held outside the group")
	}
	if !res.TimedOut || res.OutputCapture.TransportComplete {
		t.Fatalf("%+v", res)
	}
}

// TestLongestEnvString: the longest string exec takes (131072 bytes with
// its NUL) reaches the command; one byte more is invalid_argument.
func TestLongestEnvString(t *testing.T) {
	v := strings.Repeat("v", 131072-1-len("BIG="))
	res, err := Run(context.Background(), Request{Command: `printf %s "${#BIG}"`, Env: map[string]string{"BIG": v}}, opts(nil))
	if err != nil || res.Stdout.Data != strconv.Itoa(len(v)) {
		t.Fatalf("%v %+v", err, res)
	}
	if _, err := Run(context.Background(), Request{Command: "true", Env: map[string]string{"BIG": v + "v"}}, opts(nil)); !errcode.Is(err, errcode.InvalidArgument) {
		t.Fatalf("one byte over: %v, want invalid_argument", err)
	}
}
