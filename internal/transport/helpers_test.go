package transport

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// patience bounds every wait for something that must happen eventually. It
// is a failure bound, never a timing assertion: the events it waits for are
// certain, and it only keeps a broken implementation from hanging the run.
const patience = 20 * time.Second

// hijacker is the minimal http.ResponseWriter + http.Hijacker gorilla's
// Upgrader needs to upgrade a connection that did not come from net/http.
type hijacker struct {
	conn net.Conn
	brw  *bufio.ReadWriter
	h    http.Header
}

func (w *hijacker) Header() http.Header         { return w.h }
func (w *hijacker) Write(b []byte) (int, error) { return w.conn.Write(b) }
func (w *hijacker) WriteHeader(int)             {}
func (w *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.conn, w.brw, nil
}

// pipeWS returns two WebSocket ends over a synchronous, unbuffered net.Pipe:
// a write on one end blocks until the other end reads, so a peer that never
// reads stalls the writer deterministically. client is the dialing end.
func pipeWS(t *testing.T) (client, server *websocket.Conn) {
	t.Helper()
	c1, c2 := net.Pipe()
	srvCh := make(chan *websocket.Conn, 1)
	errCh := make(chan error, 1)
	go func() {
		br := bufio.NewReader(c2)
		req, err := http.ReadRequest(br)
		if err != nil {
			errCh <- err
			return
		}
		w := &hijacker{conn: c2, brw: bufio.NewReadWriter(br, bufio.NewWriter(c2)), h: http.Header{}}
		ws, err := (&websocket.Upgrader{}).Upgrade(w, req, nil)
		if err != nil {
			errCh <- err
			return
		}
		srvCh <- ws
	}()
	d := websocket.Dialer{NetDialContext: func(context.Context, string, string) (net.Conn, error) { return c1, nil }}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cws, _, err := d.DialContext(ctx, "ws://pipe/v1/agent", nil)
	if err != nil {
		t.Fatalf("pipe dial: %v", err)
	}
	select {
	case sws := <-srvCh:
		t.Cleanup(func() { _ = cws.Close(); _ = sws.Close() })
		return cws, sws
	case err := <-errCh:
		t.Fatalf("pipe upgrade: %v", err)
	}
	return nil, nil
}

// tcpWS returns two WebSocket ends over loopback TCP through an
// httptest.Server. tune, if set, adjusts the dialing side's TCP conn and the
// accepted side's TCP conn (e.g. to shrink socket buffers).
func tcpWS(t *testing.T, tune func(*net.TCPConn)) (client, server *websocket.Conn) {
	t.Helper()
	srvCh := make(chan *websocket.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		if tc, ok := ws.UnderlyingConn().(*net.TCPConn); ok && tune != nil {
			tune(tc)
		}
		srvCh <- ws
	}))
	t.Cleanup(srv.Close)
	d := websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok && tune != nil {
			tune(tc)
		}
		return c, err
	}}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cws, _, err := d.DialContext(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+AgentPath, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	select {
	case sws := <-srvCh:
		t.Cleanup(func() { _ = cws.Close(); _ = sws.Close() })
		return cws, sws
	case <-ctx.Done():
		t.Fatal("no upgrade")
	}
	return nil, nil
}

// waitEnd waits for c to end and checks the reason and that every goroutine
// of the link has exited.
func waitEnd(t *testing.T, c *Conn, want End) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(patience):
		t.Fatalf("link did not end (want %s)", want)
	}
	if got := c.End(); got != want {
		t.Fatalf("End() = %q, want %q", got, want)
	}
	waitExited(t, c)
}

// waitExited fails unless all of c's goroutines exit.
func waitExited(t *testing.T, c *Conn) {
	t.Helper()
	ch := make(chan struct{})
	go func() { c.wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(patience):
		t.Fatal("link goroutines did not exit")
	}
}

// drain reads ws until it fails, delivering text messages on msgs and the
// final error on end. It answers pings and close frames (gorilla defaults).
type drained struct {
	msgs chan []byte
	end  chan error
}

func drain(ws *websocket.Conn) *drained {
	d := &drained{msgs: make(chan []byte, 1024), end: make(chan error, 1)}
	go func() {
		for {
			_, b, err := ws.ReadMessage()
			if err != nil {
				d.end <- err
				return
			}
			select {
			case d.msgs <- b:
			default: // a test that does not look at messages
			}
		}
	}()
	return d
}

func (d *drained) next(t *testing.T) []byte {
	t.Helper()
	select {
	case b := <-d.msgs:
		return b
	case err := <-d.end:
		t.Fatalf("peer read ended: %v", err)
	case <-time.After(patience):
		t.Fatal("no message")
	}
	return nil
}

func (d *drained) closeCode(t *testing.T) int {
	t.Helper()
	select {
	case err := <-d.end:
		ce, ok := err.(*websocket.CloseError)
		if !ok {
			t.Fatalf("peer read ended with %T %v, want a close frame", err, err)
		}
		return ce.Code
	case <-time.After(patience):
		t.Fatal("peer saw no close")
	}
	return 0
}

// writeText writes one text message on ws, failing the test on error.
func writeText(t *testing.T, ws *websocket.Conn, s string) {
	t.Helper()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
		t.Fatalf("peer write: %v", err)
	}
}

// nextIsAfter writes the notification x/after on peer and fails unless it
// is the next message c's Read returns: whatever peer wrote before it
// stayed on the link.
func nextIsAfter(t *testing.T, peer *websocket.Conn, c *Conn) {
	t.Helper()
	writeText(t, peer, `{"jsonrpc":"2.0","method":"x/after"}`)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	msg, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if r, ok := msg.(*jsonrpc.Request); !ok || r.Method != "x/after" {
		t.Fatalf("read %T %+v, want x/after", msg, msg)
	}
}
