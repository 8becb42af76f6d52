// The gate: whether a tool call may run, and for whom. Over the
// link, the server's per-call grant must name this device, this tool and a
// principal (an admin's only for AdminTools), be unexpired and unused;
// then, for every server, the owner's local permission ceiling applies.
// Both are checked on every call, including calls about jobs that are
// already running. A call over the link acts for the grant's principal; a
// local one for principal.Local.

package authz

import (
	"context"
	"crypto/ed25519"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/principal"
)

// AdminTools are the only tools a grant naming an admin principal (the
// relay's web panel) may call: listing, reading (a terminal's screen too)
// and stopping jobs, never starting one or reaching the machine's files.
var AdminTools = []string{"process.jobs", "process.status", "process.output", "process.screen", "process.stop"}

// Gate is the signature of tools.Gate.
type Gate = func(ctx context.Context, req *mcp.CallToolRequest, tool string) (principal.Principal, error)

// LocalGate admits, as principal.Local, what the owner's ceiling in
// configDir allows. The file is read on every call, so an owner's edit
// takes effect at once.
func LocalGate(configDir string) Gate {
	return func(_ context.Context, _ *mcp.CallToolRequest, tool string) (principal.Principal, error) {
		if err := checkCeiling(configDir, principal.Local, tool); err != nil {
			return "", err
		}
		return principal.Local, nil
	}
}

// checkCeiling applies the owner's ceiling, read afresh, to who's call of
// tool: an admin the owner refuses is told so whatever the tool.
func checkCeiling(configDir string, who principal.Principal, tool string) error {
	c, err := LoadCeiling(configDir)
	if err != nil {
		return err
	}
	if who.IsAdmin() && !c.AdminsAllowed() {
		return errcode.New(errcode.AdminRefused, "this device does not allow admin views")
	}
	return c.Check(tool)
}

// RemoteGate admits a call that carries a valid, unused grant for device and
// tool, naming a remote principal (or an admin, for AdminTools only), and
// that the owner's ceiling allows. The call acts for the grant's principal.
// used remembers the grants seen, so each is good for one call.
func RemoteGate(configDir, device string, key ed25519.PublicKey, used *UsedGrants, now func() time.Time) Gate {
	return func(_ context.Context, req *mcp.CallToolRequest, tool string) (principal.Principal, error) {
		at := now()
		c, err := VerifyGrant(key, GrantFromMeta(req.Params.GetMeta()), device, tool, req.Params.Arguments, at)
		if err != nil {
			return "", err
		}
		who := principal.Principal(c.Principal)
		switch {
		case who.IsAdmin():
			if !slices.Contains(AdminTools, tool) {
				return "", errcode.New(errcode.PermissionDenied, "an admin grant may only list, read and stop jobs")
			}
		// A relay may not act as the machine's owner, nor name a principal
		// a job's metadata could not record.
		case !principal.Valid(c.Principal):
			return "", errcode.New(errcode.GrantInvalid, "grant names an invalid principal")
		}
		if err := used.Use(c, at); err != nil {
			return "", err
		}
		if err := checkCeiling(configDir, who, tool); err != nil {
			return "", err
		}
		return who, nil
	}
}
