package tools

import (
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/isolation"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/toolspec"
	"github.com/commandcore/commandcore/internal/version"
)

// NewServer is the MCP tool server of a device, the same for a local
// client over stdio and for the server's link: every tool of this build,
// each call passed through gate. The agent's own state and config
// directories are out of every file tool's reach. report, when it says
// anything, tells the relay how jobs are kept from the agent.
func NewServer(svc *jobs.Service, stateDir, configDir string, gate Gate, report isolation.Report) (*mcp.Server, error) {
	host, err := NewHost("/proc", svc, stateDir, configDir)
	if err != nil {
		return nil, err
	}
	host.ConfigDir = configDir
	// The experimental entries tell a relay that this agent checks a
	// grant's call digest and takes numbered grants.
	caps := toolspec.Capabilities()
	caps.Experimental = map[string]any{authz.BindsCallsCapability: map[string]any{}, authz.GrantSequenceCapability: map[string]any{}}
	if report != (isolation.Report{}) {
		caps.Experimental[isolation.Capability] = report.Capabilities()
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "commandcore", Version: version.Version}, &mcp.ServerOptions{
		Instructions: toolspec.Instructions, Capabilities: caps,
	})
	Register(srv, svc, host, gate)
	return srv, nil
}
