package relay

import (
	"context"
	"encoding/json"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/jsonspan"
	"github.com/commandcore/commandcore/internal/limits"
)

// progressTarget passes a forwarded call's progress to a client whose
// call the SDK serves (the requests direct.go leaves to it).
type progressTarget struct {
	// ctx is the client's request context: the HTTP transport sends a
	// notification on the stream of the request whose context it carries.
	ctx     context.Context
	session *mcp.ServerSession
	token   any
	// lost is set when a notification could not be delivered to the client.
	lost atomic.Bool
}

// forward passes one progress notification on to the client whose call
// caused it. Delivery to one client is bounded by the send timeout, so a
// stalled client cannot hold the device's link for long; what it missed
// is recorded against its call.
func (t *progressTarget) forward(raw []byte) {
	if t.lost.Load() {
		return
	}
	var params mcp.ProgressNotificationParams
	if json.Unmarshal(raw, &params) != nil {
		return
	}
	params.ProgressToken = t.token
	ctx, cancel := context.WithTimeout(t.ctx, limits.SendTimeout)
	defer cancel()
	if err := t.session.NotifyProgress(ctx, &params); err != nil {
		t.lost.Store(true)
	}
}

// appendWithToken appends a progress notification's params with the
// client's token (a JSON value) in place of the router's.
func appendWithToken(dst, params, token []byte) ([]byte, bool) {
	ms, err := jsonspan.Object(params)
	if err != nil {
		return dst, false
	}
	dst = append(dst, `{"progressToken":`...)
	dst = append(dst, token...)
	for _, m := range ms {
		if m.Key == "progressToken" {
			continue
		}
		dst = append(dst, `,"`...)
		dst = append(dst, m.Key...)
		dst = append(dst, `":`...)
		dst = append(dst, m.Value...)
	}
	return append(dst, '}'), true
}

// markIncomplete makes a process.run result admit that its live output did
// not all reach the client: the device could only vouch for the link. It
// decodes the result, which only a call that lost output pays for.
func markIncomplete(raw []byte) []byte {
	var res mcp.CallToolResult
	if json.Unmarshal(raw, &res) != nil {
		return raw
	}
	m, ok := res.StructuredContent.(map[string]any)
	if !ok {
		return raw
	}
	oc, ok := m["output_capture"].(map[string]any)
	if !ok {
		return raw
	}
	oc["transport_complete"] = false
	text, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	res.Content = []mcp.Content{&mcp.TextContent{Text: string(text)}}
	out, err := json.Marshal(&res)
	if err != nil {
		return raw
	}
	return out
}
