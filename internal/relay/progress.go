package relay

import (
	"context"
	"encoding/json"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/transport"
)

const methodProgress = "notifications/progress"

// progressTarget is where a forwarded call's progress goes.
type progressTarget struct {
	// ctx is the client's request context: the HTTP transport sends a
	// notification on the stream of the request whose context it carries.
	ctx     context.Context
	session *mcp.ServerSession
	token   any
	// lost is set when a notification could not be delivered to the client.
	lost atomic.Bool
}

// progressTap reads a device link for the relay's MCP client and forwards
// progress notifications itself, in the reader, before any later message.
// The SDK would queue them behind the call's response and could answer the
// client before its live output was delivered; here the response cannot
// overtake them, and a slow client slows the link (backpressure) instead
// of growing a queue.
type progressTap struct {
	*transport.Conn
	relay *Server
}

func (p *progressTap) Connect(ctx context.Context) (mcp.Connection, error) {
	if _, err := p.Conn.Connect(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *progressTap) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := p.Conn.Read(ctx)
		if err != nil {
			return nil, err
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok || req.IsCall() || req.Method != methodProgress {
			return msg, nil
		}
		p.relay.forwardProgress(req.Params)
	}
}

// forwardProgress hands one progress notification to the call whose
// token it carries.
func (s *Server) forwardProgress(raw json.RawMessage) {
	var params mcp.ProgressNotificationParams
	if json.Unmarshal(raw, &params) != nil {
		return
	}
	tok, ok := params.ProgressToken.(string)
	if !ok {
		return
	}
	if to, ok := s.progress.Load(tok); ok {
		to.(func(*mcp.ProgressNotificationParams))(&params)
	}
}

// forward passes one progress notification on to the client whose call
// caused it. Delivery to one client is bounded by the send timeout, so a
// stalled client cannot hold the device's link for long; what it missed
// is recorded against its call.
func (t *progressTarget) forward(params *mcp.ProgressNotificationParams) {
	if t.lost.Load() {
		return
	}
	params.ProgressToken = t.token
	ctx, cancel := context.WithTimeout(t.ctx, limits.SendTimeout)
	defer cancel()
	if err := t.session.NotifyProgress(ctx, params); err != nil {
		t.lost.Store(true)
	}
}

// markIncomplete makes a process.run result admit that its live output did
// not all reach the client: the device could only vouch for the link.
func markIncomplete(res *mcp.CallToolResult) {
	m, ok := res.StructuredContent.(map[string]any)
	if !ok {
		return
	}
	oc, ok := m["output_capture"].(map[string]any)
	if !ok {
		return
	}
	oc["transport_complete"] = false
	if text, err := json.Marshal(m); err == nil {
		res.Content = []mcp.Content{&mcp.TextContent{Text: string(text)}}
	}
}
