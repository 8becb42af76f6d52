package jobs

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/principal"
)

// startJob starts command as a job of svc and returns its ID.
func startJob(t *testing.T, svc *Service, command string) string {
	t.Helper()
	res, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: command})
	if err != nil {
		t.Fatal(err)
	}
	return res.ProcessID
}

// waitUntil waits up to timeoutMS for job id until u holds.
func waitUntil(t *testing.T, svc *Service, id string, u Until, timeoutMS int) *WaitResult {
	t.Helper()
	res, err := svc.Wait(context.Background(), principal.Local, WaitRequest{ProcessIDs: []string{id}, TimeoutMS: ms(timeoutMS), Until: &u}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func wantOutput(t *testing.T, label string, res *WaitResult, stream string, offset int64) {
	t.Helper()
	if res.Met != MetOutput || res.Stream != stream || res.Offset == nil || *res.Offset != offset {
		at := "none"
		if res.Offset != nil {
			at = fmt.Sprint(*res.Offset)
		}
		t.Fatalf("%s: met %q stream %q offset %s; want output on %s at %d", label, res.Met, res.Stream, at, stream, offset)
	}
}

func TestUntilOutputAcrossWrites(t *testing.T) {
	svc := realService(t)
	stopAll(t, svc)
	id := startJob(t, svc, "printf 'so re'; sleep 0.2; printf 'ady\\n'; exec sleep 30")
	res := waitUntil(t, svc, id, Until{Output: &OutputUntil{Text: "ready"}}, 10000)
	wantOutput(t, "split across writes", res, StreamStdout, 3)
	if res.Line != "so ready" {
		t.Errorf("the line the text is in: %q, want %q", res.Line, "so ready")
	}
	if len(res.Pending) != 1 || len(res.Ended) != 0 {
		t.Fatalf("the job runs on: %+v", res)
	}
}

func TestUntilOutputStreamsAndOffsets(t *testing.T) {
	svc := realService(t)
	stopAll(t, svc)
	id := startJob(t, svc, "printf 'ab ready' >&2; printf 'ready'; exec sleep 30")
	// Both writes are in before any look below.
	waitUntil(t, svc, id, Until{Output: &OutputUntil{Text: "ab ready", Stream: StreamStderr}}, 10000)
	waitUntil(t, svc, id, Until{Output: &OutputUntil{Text: "ready", Stream: StreamStdout}}, 10000)
	for _, tc := range []struct {
		label  string
		until  OutputUntil
		stream string
		offset int64
	}{
		{"stderr", OutputUntil{Text: "ready", Stream: StreamStderr}, StreamStderr, 3},
		{"stdout", OutputUntil{Text: "ready", Stream: StreamStdout}, StreamStdout, 0},
		{"any looks in stdout first", OutputUntil{Text: "ready"}, StreamStdout, 0},
		{"any past stdout's", OutputUntil{Text: "ready", Stream: StreamAny, FromOffset: &StreamOffsets{Stdout: 1}}, StreamStderr, 3},
		{"from the match itself", OutputUntil{Text: "ready", Stream: StreamStderr, FromOffset: &StreamOffsets{Stderr: 3}}, StreamStderr, 3},
	} {
		wantOutput(t, tc.label, waitUntil(t, svc, id, Until{Output: &tc.until}, 2000), tc.stream, tc.offset)
	}
	res := waitUntil(t, svc, id, Until{Output: &OutputUntil{Text: "ready", Stream: StreamStderr, FromOffset: &StreamOffsets{Stderr: 4}}}, 300)
	if res.Met != MetTimeout || res.Offset != nil {
		t.Fatalf("past the only match: met %q, want timeout", res.Met)
	}
	// A live stream's end is not past it: the wait waits for more.
	res = waitUntil(t, svc, id, Until{Output: &OutputUntil{Text: "x", FromOffset: &StreamOffsets{Stdout: 1 << 20}}}, 100)
	if res.Met != MetTimeout {
		t.Fatalf("an offset past a live stream's end: met %q, want timeout", res.Met)
	}
}

// TestUntilOutputInTheTail: the text is found in the tail the capture
// keeps past its head, at its offset in the stream, and never across the
// gap between them: "re" ends the head and "--" begins the tail, yet
// "re--" was never written.
func TestUntilOutputInTheTail(t *testing.T) {
	svc := realService(t)
	stopAll(t, svc)
	head, rest := limits.CaptureHeadBytes-2, limits.CaptureTailBytes+limits.CaptureRingSlack+(256<<10)
	id := startJob(t, svc, fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x; printf re; head -c %d /dev/zero | tr '\\0' -; printf ready; exec sleep 30", head, rest))
	res := waitUntil(t, svc, id, Until{Output: &OutputUntil{Text: "-ready"}}, 20000)
	wantOutput(t, "in the tail", res, StreamStdout, int64(head+2+rest-1))
	// A line of dashes as long as the tail: its last 200 bytes, the text
	// at their end, cut before.
	if want := "..." + strings.Repeat("-", limits.UntilLineMaxBytes-len("-ready")) + "-ready"; res.Line != want {
		t.Errorf("the line in the tail: %q, want %q", res.Line, want)
	}
	if res = waitUntil(t, svc, id, Until{Output: &OutputUntil{Text: "re--"}}, 300); res.Met != MetTimeout {
		t.Fatalf("text across the gap: met %q at %v, want timeout", res.Met, res.Offset)
	}
	res = waitUntil(t, svc, id, Until{Output: &OutputUntil{Text: "xre"}}, 2000)
	wantOutput(t, "at the end of the head", res, StreamStdout, int64(head-1))
	// The line goes on past the gap: cut after too.
	if want := "..." + strings.Repeat("x", limits.UntilLineMaxBytes-2) + "re..."; res.Line != want {
		t.Errorf("the line at the end of the head: %q, want %q", res.Line, want)
	}
}

func TestUntilOutputAndTheJobsEnd(t *testing.T) {
	svc := realService(t)
	ended := startJob(t, svc, "echo done")
	res := waitUntil(t, svc, ended, Until{Output: &OutputUntil{Text: "never"}}, 10000)
	if res.Met != MetEnded || len(res.Ended) != 1 {
		t.Fatalf("a job that ends without the text: met %q, %+v; want ended", res.Met, res)
	}
	// Written just before the end: the text is what was waited for.
	quick := startJob(t, svc, "echo ready; exit 0")
	if _, err := svc.awaitTerminal(context.Background(), quick, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	wantOutput(t, "text then the end", waitUntil(t, svc, quick, Until{Output: &OutputUntil{Text: "ready"}}, 10000), StreamStdout, 0)
	// A sealed stream's end is as far as an offset goes.
	_, err := svc.Wait(context.Background(), principal.Local, WaitRequest{ProcessIDs: []string{ended},
		Until: &Until{Output: &OutputUntil{Text: "x", Stream: StreamStdout, FromOffset: &StreamOffsets{Stdout: 6}}}}, nil)
	if !errcode.Is(err, errcode.InvalidArgument) || !strings.Contains(err.Error(), "until.output.from_offset.stdout") {
		t.Fatalf("an offset past a sealed stream: %v, want invalid_argument naming it", err)
	}
}

// TestUntilPortIsTheJobsOwn: another program listening on a port does not
// meet until.port; the job's own server (a process of its unit) does.
func TestUntilPortIsTheJobsOwn(t *testing.T) {
	svc := realService(t)
	stopAll(t, svc)
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otherPort := other.Addr().(*net.TCPAddr).Port
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	id := startJob(t, svc, fmt.Sprintf("sleep 0.3; exec python3 -m http.server %d --bind 127.0.0.1", port))
	if res := waitUntil(t, svc, id, Until{Port: &otherPort}, 1000); res.Met != MetTimeout {
		t.Fatalf("another program's listener on %d: met %q, want timeout", otherPort, res.Met)
	}
	if res := waitUntil(t, svc, id, Until{Port: &port}, 15000); res.Met != MetPort || len(res.Pending) != 1 {
		t.Fatalf("the job's own listener on %d: met %q, want port", port, res.Met)
	}
}

func TestUntilPath(t *testing.T) {
	svc := service(t, "/nonexistent")
	id, _ := liveJob(t, svc, "")
	path := filepath.Join(t.TempDir(), "built", "out")
	time.AfterFunc(200*time.Millisecond, func() {
		os.MkdirAll(filepath.Dir(path), 0o700)
		os.WriteFile(path, nil, 0o600)
	})
	if res := waitUntil(t, svc, id, Until{Path: path}, 10000); res.Met != MetPath {
		t.Fatalf("a path that appears: met %q, want path", res.Met)
	}
	refusal := errcode.New(errcode.PermissionDenied, "not there")
	_, err := svc.Wait(context.Background(), principal.Local, WaitRequest{ProcessIDs: []string{id}, Until: &Until{Path: "/x"}},
		func(string) (bool, error) { return false, refusal })
	if err != refusal {
		t.Fatalf("a refused path: %v, want the probe's refusal", err)
	}
}

func TestUntilRefusesBadConditions(t *testing.T) {
	svc := service(t, "/nonexistent")
	id, _ := liveJob(t, svc, "")
	other, _ := liveJob(t, svc, "")
	port := func(n int) *int { return &n }
	for field, tc := range map[string]struct {
		ids   []string
		until Until
	}{
		"exactly one job":                   {[]string{id, other}, Until{Path: "/x"}},
		"until must name":                   {[]string{id}, Until{}},
		"until.output.text":                 {[]string{id}, Until{Output: &OutputUntil{}}},
		"until.output.text must be 1-1024":  {[]string{id}, Until{Output: &OutputUntil{Text: strings.Repeat("a", 1025)}}},
		"until.output.stream":               {[]string{id}, Until{Output: &OutputUntil{Text: "a", Stream: "both"}}},
		"until.output.from_offset":          {[]string{id}, Until{Output: &OutputUntil{Text: "a", FromOffset: &StreamOffsets{Stderr: -1}}}},
		"until.port must be between 1":      {[]string{id}, Until{Port: port(0)}},
		"until.port must be between 1 and ": {[]string{id}, Until{Port: port(65536)}},
		"until.path":                        {[]string{id}, Until{Path: "relative/p"}},
		"until.path must be an absolute":    {[]string{id}, Until{Path: "/a\x00b"}},
	} {
		u := tc.until
		_, err := svc.Wait(context.Background(), principal.Local, WaitRequest{ProcessIDs: tc.ids, Until: &u}, nil)
		if !errcode.Is(err, errcode.InvalidArgument) || !strings.Contains(err.Error(), field) {
			t.Errorf("%+v: %v, want invalid_argument naming %q", u, err, field)
		}
	}
	// At the bounds.
	for _, u := range []Until{{Output: &OutputUntil{Text: strings.Repeat("a", 1024)}}, {Port: port(1)}, {Port: port(65535)}} {
		if _, err := svc.Wait(context.Background(), principal.Local, WaitRequest{ProcessIDs: []string{id}, TimeoutMS: ms(0), Until: &u}, nil); err != nil {
			t.Errorf("%+v: %v", u, err)
		}
	}
}

// TestLineAround pins the line a met output shows: the whole line where it
// fits, else at most limits.UntilLineMaxBytes around the text, "..."
// where it was cut or goes on past what was read, cut on characters.
func TestLineAround(t *testing.T) {
	n := limits.UntilLineMaxBytes
	long := strings.Repeat("a", 300)
	for _, tc := range []struct {
		name, data, text string
		openStart        bool
		openEnd          bool
		want             string
	}{
		{"a line of its own", "one\nlisten on :8080\nthree\n", "listen", false, false, "listen on :8080"},
		{"the first line, a terminal's", "ready\r\nnext", "ready", false, false, "ready"},
		{"a progress line's last redraw", "10%\r50% ready\r", "ready", false, false, "50% ready"},
		{"text across lines", "a\nb\nc", "a\nb", false, false, "a\nb"},
		{"the read starts mid-line", "tail of a line ready\n", "ready", true, false, "...tail of a line ready"},
		{"the line goes on past the read", "ready and", "ready", false, true, "ready and..."},
		{"an end found closes the line", "x\nready\n", "ready", true, true, "ready"},
		{"a long line, the text in the middle", long + "ready" + long + "\n", "ready", false, false,
			"..." + strings.Repeat("a", (n-5)/2) + "ready" + strings.Repeat("a", n-5-(n-5)/2) + "..."},
		{"a long line, the text near its start", "ab ready" + long, "ready", false, false, "ab ready" + strings.Repeat("a", n-8) + "..."},
		{"a long line, the text at its end", long + "ready", "ready", false, false, "..." + strings.Repeat("a", n-5) + "ready"},
		{"a text longer than the bound", "x " + strings.Repeat("r", 2*n) + " y", strings.Repeat("r", 2*n), false, false,
			"..." + strings.Repeat("r", n) + "..."},
		{"cut on characters", strings.Repeat("é", 200) + "ready" + strings.Repeat("é", 200), "ready", false, false,
			"..." + strings.Repeat("é", 48) + "ready" + strings.Repeat("é", 49) + "..."},
		{"bytes that are not UTF-8", "\xffready", "ready", false, false, "\uFFFDready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := strings.Index(tc.data, tc.text)
			got := lineAround([]byte(tc.data), i, i+len(tc.text), tc.openStart, tc.openEnd)
			if got != tc.want {
				t.Errorf("line\n%q\nwant\n%q", got, tc.want)
			}
			if body := strings.TrimSuffix(strings.TrimPrefix(got, "..."), "..."); len(body) > n {
				t.Errorf("%d bytes of line, more than %d", len(body), n)
			}
		})
	}
}
