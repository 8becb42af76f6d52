package relay

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/testkit"
)

// dialFrom opens a TCP connection to the relay from a loopback source
// address of its own (any 127.x.y.z is this host), as a distinct client
// would; "" is the default source.
func (h *harness) dialFrom(tb testing.TB, source string) net.Conn {
	tb.Helper()
	d := net.Dialer{Timeout: 10 * time.Second}
	if source != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(source)}
	}
	conn, err := d.Dial("tcp", h.hs.Listener.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// drip writes prefix, then one byte every 100 ms until the connection
// fails, as a slow (or malicious) client does.
func drip(conn net.Conn, prefix string) {
	go func() {
		if _, err := io.WriteString(conn, prefix); err != nil {
			return
		}
		for {
			time.Sleep(100 * time.Millisecond)
			if _, err := conn.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
}

// closedWithin waits until the relay closes conn, and reports it if that
// does not happen within limit.
func closedWithin(tb testing.TB, what string, conn net.Conn, limit time.Duration) {
	tb.Helper()
	conn.SetReadDeadline(time.Now().Add(limit))
	_, err := io.Copy(io.Discard, conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		tb.Errorf("%s: the connection was still open after %s", what, limit)
	}
}

// TestIdleAndSlowConnectionsAreClosed: a connection that never sends a
// request, sends its headers or an unauthenticated body slowly, or idles
// after a request, is closed by the relay within its bound.
func TestIdleAndSlowConnectionsAreClosed(t *testing.T) {
	const bound = 500 * time.Millisecond
	h := newHarness(t, func(s *Server) {
		s.Timeouts = Timeouts{Header: bound, Idle: bound, Unauthenticated: bound}
	})
	// Generous slack for a loaded machine; the bounds themselves are short.
	const limit = bound + 5*time.Second
	var wg sync.WaitGroup
	check := func(what string, conn net.Conn) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			closedWithin(t, what, conn, limit)
		}()
	}
	check("no request", h.dialFrom(t, ""))

	slowHeaders := h.dialFrom(t, "")
	drip(slowHeaders, "POST /v1/enroll HTTP/1.1\r\nHost: relay\r\nX-Slow: ")
	check("slow headers", slowHeaders)

	for _, path := range []string{"/v1/enroll", "/mcp", "/mcp/dev", "/v1/agent", "/elsewhere"} {
		conn := h.dialFrom(t, "")
		drip(conn, "POST "+path+" HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
		check("slow body to "+path, conn)
	}

	idle := h.dialFrom(t, "")
	io.WriteString(idle, "GET /v1/agent HTTP/1.1\r\nHost: relay\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a request without a device token: %v %v", res, err)
	}
	io.Copy(io.Discard, res.Body)
	check("idle keep-alive", idle)
	wg.Wait()
}

// TestSlowConnectionsDoNotStarveClients: 300 connections (idle, slow
// headers, slow enrollment bodies from 100 addresses) are held open while a
// real client's calls all succeed; enrollments beyond MaxEnrolling are
// answered 503 at once instead of queueing.
func TestSlowConnectionsDoNotStarveClients(t *testing.T) {
	h := newHarness(t, func(s *Server) {
		// Long enough that none of the slow connections is cut off before
		// the client is done: it is the relay's capacity under test here.
		s.Timeouts = Timeouts{Header: time.Minute, Unauthenticated: time.Minute}
	})
	device := fakeDevice()
	var calls atomic.Int32
	device.AddTool(&mcp.Tool{Name: "process.jobs", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			calls.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"jobs":[]}`}}}, nil
		})
	h.link(t, device)

	for range 100 {
		h.dialFrom(t, "")
		drip(h.dialFrom(t, ""), "POST /mcp HTTP/1.1\r\nHost: relay\r\nX-Slow: ")
	}
	var busy, other atomic.Int32
	for i := range 100 {
		conn := h.dialFrom(t, fmt.Sprintf("127.0.1.%d", i+1))
		drip(conn, "POST /v1/enroll HTTP/1.1\r\nHost: relay\r\nContent-Length: 100000\r\n\r\n{")
		go func() {
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			switch {
			case err != nil:
			case res.StatusCode == http.StatusServiceUnavailable:
				busy.Add(1)
			default:
				other.Add(1)
			}
		}()
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		if n := busy.Load(); n < 100-MaxEnrolling {
			return fmt.Errorf("%d of %d enrollments past the bound were answered 503", n, 100-MaxEnrolling)
		}
		return nil
	})

	session := h.connect(t, "/mcp/dev", nil)
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "process.jobs", Arguments: map[string]any{}})
		cancel()
		if err != nil || res.IsError {
			t.Fatalf("call %d: %v %+v", i, err, res)
		}
	}
	if n := calls.Load(); n != 20 {
		t.Fatalf("the device got %d calls", n)
	}
	if n := other.Load(); n != 0 || busy.Load() != 100-MaxEnrolling {
		t.Fatalf("%d slow enrollments were answered otherwise and %d with 503; the rest must still be waiting", n, busy.Load())
	}
}

// TestUnauthenticatedRequestsAreBounded: with MaxUnauthenticated requests
// in progress that have not shown a credential, the next is answered 503
// at once; as they finish, requests are served again.
func TestUnauthenticatedRequestsAreBounded(t *testing.T) {
	h := newHarness(t, nil)
	// A linked device and a call in progress hold no slot: they presented
	// their credentials.
	entered, release := make(chan struct{}), make(chan struct{})
	device := fakeDevice()
	device.AddTool(&mcp.Tool{Name: "process.output", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			close(entered)
			<-release
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{}`}}}, nil
		})
	h.link(t, device)
	session := h.connect(t, "/mcp/dev", nil)
	done := make(chan error, 1)
	go func() {
		_, err := session.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.output", Arguments: map[string]any{}})
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the call never reached the device")
	}
	held := len(h.srv.gates.unauthenticated)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Fatalf("%d slots held by authenticated requests", held)
	}
	// The slots stand for requests stuck before their credentials (a
	// flood); filling them directly is what that flood would do.
	for range MaxUnauthenticated {
		h.srv.gates.unauthenticated <- struct{}{}
	}
	status, body := postEnroll(t, h.hs.URL, "ccE-AAAAAAAAAAAAAAAAAAAA", "box")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, `"unavailable"`) {
		t.Fatalf("past the bound: %d %s", status, body)
	}
	for range MaxUnauthenticated {
		<-h.srv.gates.unauthenticated
	}
	if status, body := postEnroll(t, h.hs.URL, "ccE-AAAAAAAAAAAAAAAAAAAA", "box"); status != http.StatusForbidden {
		t.Fatalf("after the flood: %d %s", status, body)
	}
}

// clientFrom returns an HTTP client whose connections come from source.
func clientFrom(source string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// TestEnrollmentRateLimit: one address gets a burst of 10 enrollment
// requests, then 429 with Retry-After; another address is not affected.
func TestEnrollmentRateLimit(t *testing.T) {
	h := newHarness(t, nil)
	guess := func(c *http.Client) (*http.Response, string) {
		t.Helper()
		res, err := c.Post(h.hs.URL+"/v1/enroll", "application/json", strings.NewReader(`{"code":"ccE-AAAAAAAAAAAAAAAAAAAA","name":"box"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res, string(body)
	}
	attacker := clientFrom("127.0.2.1")
	for i := range 10 {
		if res, body := guess(attacker); res.StatusCode != http.StatusForbidden {
			t.Fatalf("guess %d: %d %s", i+1, res.StatusCode, body)
		}
	}
	res, body := guess(attacker)
	var e errorBody
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" ||
		json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != errcode.RateLimited {
		t.Fatalf("guess 11: %d %q %s", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	if res, body := guess(clientFrom("127.0.2.2")); res.StatusCode != http.StatusForbidden {
		t.Fatalf("another address: %d %s", res.StatusCode, body)
	}
}

func TestSourceLimiterStaysBounded(t *testing.T) {
	l := newSourceLimiter(1, time.Hour, 3)
	now := time.Now()
	for _, k := range []string{"a", "b", "c"} {
		if !l.allow(k, now) {
			t.Fatalf("%s refused at once", k)
		}
	}
	if l.allow("a", now) {
		t.Fatal("a's burst was not spent")
	}
	// d evicts the least recently seen (b: a was just seen), not more.
	l.allow("d", now)
	if len(l.byKey) != 3 || l.recent.Len() != 3 {
		t.Fatalf("table holds %d/%d entries, want 3", len(l.byKey), l.recent.Len())
	}
	if l.allow("a", now) || l.allow("c", now) {
		t.Fatal("a recently seen address was forgotten")
	}
	if !l.allow("b", now) {
		t.Fatal("the least recently seen address was kept")
	}
}

func TestSourceKey(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:443":                 "192.0.2.7",
		"[::ffff:192.0.2.7]:1":          "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:9":      "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1%eth0]:9": "2001:db8:1:2::/64",
		"nonsense":                      "",
		"@":                             "",
	} {
		if got := sourceKey(addr); got != want {
			t.Errorf("sourceKey(%q) = %q, want %q", addr, got, want)
		}
	}
}

func FuzzSourceKey(f *testing.F) {
	f.Add("192.0.2.7:443")
	f.Add("[2001:db8::1%eth0]:9")
	f.Fuzz(func(t *testing.T, addr string) {
		key := sourceKey(addr)
		if len(key) > len("ffff:ffff:ffff:ffff::/64") {
			t.Fatalf("sourceKey(%q) = %q: longer than any address", addr, key)
		}
		if key != "" && sourceKey(addr) != key {
			t.Fatal("not deterministic")
		}
	})
}

// TestLongRequestsOutliveTheBounds: with read and write bounds far
// shorter than the calls, a long poll, a call streaming progress, and the
// device's WebSocket link all last as long as they need.
func TestLongRequestsOutliveTheBounds(t *testing.T) {
	const bound = 200 * time.Millisecond
	h := newHarness(t, func(s *Server) {
		s.Timeouts = Timeouts{Header: bound, Unauthenticated: bound, Body: bound, Write: bound}
	})
	const long = 1500 * time.Millisecond
	device := fakeDevice()
	device.AddTool(&mcp.Tool{Name: "process.output", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-time.After(long):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{}`}}}, nil
		})
	const notes = 5
	device.AddTool(&mcp.Tool{Name: "process.run", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			for i := range notes {
				time.Sleep(long / notes)
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: req.Params.GetProgressToken(), Progress: float64(i + 1), Message: "tick"}); err != nil {
					return nil, err
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{}`}}}, nil
		})
	h.link(t, device)
	linked := h.srv.connected(h.dev.ID)

	var got atomic.Int32
	session := h.connect(t, "/mcp/dev", &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { got.Add(1) },
	})
	if res, err := session.CallTool(context.Background(), &mcp.CallToolParams{Name: "process.output", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Fatalf("long poll: %v %+v", err, res)
	}
	params := &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{}}
	params.SetProgressToken("p")
	if res, err := session.CallTool(context.Background(), params); err != nil || res.IsError {
		t.Fatalf("streaming call: %v %+v", err, res)
	}
	// The client handles notifications apart from results, so the last
	// may be handled just after the result.
	testkit.Eventually(t, 10*time.Second, func() error {
		if n := got.Load(); n != notes {
			return fmt.Errorf("%d of %d progress notifications arrived", n, notes)
		}
		return nil
	})
	if h.srv.connected(h.dev.ID) != linked {
		t.Fatal("the device's link did not outlive the bounds")
	}
}
