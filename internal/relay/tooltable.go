package relay

import (
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/toolspec"
)

// deviceArgNote ends a tool's description on the multi-device endpoint,
// where every device tool takes one more argument.
const deviceArgNote = " On this endpoint, the device argument names the device that runs it (see devices.list)."

// endpointTools are the device tools as each endpoint shows them, built
// once, on first use, from the relay's own table (tool definitions a client
// sees come from the relay itself, never from a device). Sessions
// share them read-only. Lazily: every role of the binary loads this
// package, and the per-job supervisor must not pay for the table.
var endpointTools = sync.OnceValues(func() (single, multi []*mcp.Tool) {
	single = toolspec.Tools()
	for _, t := range toolspec.Tools() {
		t.Description += deviceArgNote
		t.InputSchema = withDevice(t.InputSchema)
		multi = append(multi, t)
	}
	return single, multi
})

// toolNames are the device tools' names, in the table's order.
func toolNames() []string {
	single, _ := endpointTools()
	names := make([]string, len(single))
	for i, t := range single {
		names[i] = t.Name
	}
	return names
}
