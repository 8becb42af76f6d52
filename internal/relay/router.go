package relay

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Router carries a forwarded call to the link that holds its device. The
// relay authorizes the call, mints its grant and shapes the answer; the
// router only moves it. The default is this process's own links; relays
// run as several replicas would route to the one that holds the link
// (docs/scaling.md).
type Router interface {
	// Call sends params, grant included, to the device and returns its
	// result. When progress is not nil, every progress notification the
	// device sends for the call reaches it, in order and before Call
	// returns (its token is the router's own, not the client's). A call
	// whose ctx ends is cancelled on the device. ErrNoRoute: no link holds
	// the device.
	Call(ctx context.Context, deviceID string, params *mcp.CallToolParams, progress func(*mcp.ProgressNotificationParams)) (*mcp.CallToolResult, error)
}

// ErrNoRoute is a Router's answer for a device no link holds.
var ErrNoRoute = errors.New("no link holds the device")

// localRouter routes through the links this process holds (device.go).
type localRouter struct{ s *Server }

func (r localRouter) Call(ctx context.Context, deviceID string, params *mcp.CallToolParams, progress func(*mcp.ProgressNotificationParams)) (*mcp.CallToolResult, error) {
	l := r.s.connected(deviceID)
	if l == nil {
		return nil, ErrNoRoute
	}
	if progress != nil {
		// The link's reader hands the call's notifications to progress
		// (progressTap), found by a token no other call has.
		id := randomID()
		r.s.progress.Store(id, progress)
		defer r.s.progress.Delete(id)
		params.SetProgressToken(id)
	}
	return l.session.CallTool(ctx, params)
}

// router is the Router calls go through.
func (s *Server) router() Router {
	if s.Router != nil {
		return s.Router
	}
	return localRouter{s}
}
