// Package access decides whether a tool call may run (SPEC §4): over the
// link, the server's per-call grant must name this device, this tool and a
// principal, and be unexpired; then, for every server, the owner's local
// permission ceiling applies. Both are checked on every call, including
// calls about jobs that are already running.
package access

import (
	"context"
	"crypto/ed25519"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/grant"
	"github.com/commandcore/commandcore/internal/permissions"
)

// Gate is the signature of tools.Gate.
type Gate = func(ctx context.Context, req *mcp.CallToolRequest, tool string) error

// Local admits what the owner's ceiling in configDir allows. The file is
// read on every call, so an owner's edit takes effect at once.
func Local(configDir string) Gate {
	return func(_ context.Context, _ *mcp.CallToolRequest, tool string) error {
		c, err := permissions.Load(configDir)
		if err != nil {
			return err
		}
		return c.Check(tool)
	}
}

// Remote admits a call that carries a valid grant for device and tool,
// and that the owner's ceiling allows.
func Remote(configDir, device string, key ed25519.PublicKey, now func() time.Time) Gate {
	local := Local(configDir)
	return func(ctx context.Context, req *mcp.CallToolRequest, tool string) error {
		token := grant.FromMeta(req.Params.GetMeta())
		if _, err := grant.Verify(key, token, device, tool, now()); err != nil {
			return err
		}
		return local(ctx, req, tool)
	}
}
