package relay

import (
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/toolspec"
)

// deviceArgNote ends a tool's description on the multi-device endpoint,
// where every device tool takes one more argument.
const deviceArgNote = " On this endpoint, the device argument names the device that runs it (see devices.list)."

// The device tools as each endpoint shows them, built once from the
// relay's own table (SPEC §7: tool definitions a client sees come from the
// relay itself, never from a device). Sessions share them read-only.
var singleDeviceTools, multiDeviceTools = endpointTools()

func endpointTools() (single, multi []*mcp.Tool) {
	single = toolspec.Tools()
	for _, t := range toolspec.Tools() {
		t.Description += deviceArgNote
		t.InputSchema = withDevice(t.InputSchema)
		multi = append(multi, t)
	}
	return single, multi
}
