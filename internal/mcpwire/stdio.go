package mcpwire

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Stdio is the SDK's newline-delimited JSON transport over In and Out
// (mcp.IOTransport: its reading, framing and JSON-RPC batches), except that
// it writes single messages itself with Encode.
//
// Batches stay the SDK's: a response may have to wait for the rest of its
// batch and go out in one array with them, which only the SDK's connection
// tracks. So once a batch has come in (the reader watches for a '[' that
// opens a message), every later message is written by the SDK's
// connection as before. Unlike mcp.StdioTransport, the SDK's connection
// does not learn the negotiated protocol version through this wrapper
// (that hook is unexported), so it answers a batch under 2025-06-18 and
// later too, where the SDK would end the session.
type Stdio struct {
	In  io.Reader
	Out io.Writer
}

// Connect implements mcp.Transport.
func (t *Stdio) Connect(ctx context.Context) (mcp.Connection, error) {
	in := &batchWatch{r: t.In, lineStart: true}
	c := &conn{in: in, out: t.Out}
	inner, err := (&mcp.IOTransport{Reader: in, Writer: writer{c}}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	c.Connection = inner
	return c, nil
}

type conn struct {
	mcp.Connection // the SDK's, for reading, closing and batches
	in             *batchWatch
	out            io.Writer
	// mu makes each message's write whole, the SDK's (which may span
	// several writes) and this package's alike.
	mu sync.Mutex
}

func (c *conn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if c.in.batched.Load() {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.Connection.Write(ctx, msg)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	frame, err := Encode(msg)
	if err != nil {
		return err
	}
	frame = append(frame, '\n')
	c.mu.Lock()
	defer c.mu.Unlock()
	// A batch seen meanwhile is answered by the SDK, which writes under
	// mu too; this message is not part of it (it was read before).
	_, err = c.out.Write(frame)
	return err
}

// writer is Out for the SDK's connection, which writes only while conn.mu
// is held (conn.Write takes it around the SDK's Write).
type writer struct{ c *conn }

func (w writer) Write(p []byte) (int, error) { return w.c.out.Write(p) }

// Close does not close Out: like mcp.StdioTransport, the connection ends
// without closing the process's standard output.
func (writer) Close() error { return nil }

// batchWatch passes In through and records whether a message that opens
// with '[' (a batch) has come. Messages are separated by newlines and a
// string cannot hold a raw newline, so the first byte after a newline
// that is not white space opens a message, or continues one spread over
// lines; the latter may be taken for a batch, which costs only the fast
// path, never correctness.
type batchWatch struct {
	r         io.Reader
	lineStart bool // only the SDK's reading goroutine reads
	batched   atomic.Bool
}

func (b *batchWatch) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	for _, c := range p[:n] {
		switch {
		case c == '\n':
			b.lineStart = true
		case !b.lineStart, c == ' ', c == '\t', c == '\r':
		case c == '[':
			b.batched.Store(true)
			b.lineStart = false
		default:
			b.lineStart = false
		}
	}
	return n, err
}

// Close ends the reading side: In is closed when it can be.
func (b *batchWatch) Close() error {
	if c, ok := b.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
