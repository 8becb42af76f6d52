package relay

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// grant mints the grant for one call of tool with args on dev, for
// principal: bound to the call when dev's agent checks the binding, so
// that a grant seen anywhere (a NATS message, a log) authorizes that call
// and no other, and numbered by this relay process when the agent takes
// numbered grants, so that it refuses a replay at any call rate.
func (s *Server) grant(dev *store.Device, tool, principal string, args json.RawMessage) (string, error) {
	call := ""
	if dev.BindsCalls {
		call = authz.CallDigest(tool, args)
	}
	if dev.NumbersGrants {
		return authz.MintNumbered(s.key, s.minter, dev.ID, tool, principal, call, s.Now())
	}
	return authz.MintGrant(s.key, dev.ID, tool, principal, call, s.Now())
}

// deviceFailure is what a failed look-up of a call's device tells the
// caller: the state is unreachable, or the device is not there.
func (s *Server) deviceFailure(err error) error {
	if stateFailed(err) {
		return errState
	}
	return errNoDevice
}

// announces reports whether a device's agent announced the experimental
// capability name: that it checks a grant's call digest, or takes
// numbered grants.
func announces(caps *mcp.ServerCapabilities, name string) bool {
	if caps == nil {
		return false
	}
	on, _ := caps.Experimental[name].(map[string]any)
	return on != nil
}
