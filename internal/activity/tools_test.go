package activity

import (
	"testing"

	"github.com/commandcore/commandcore/internal/toolspec"
)

// TestEveryServedToolHasItsOwnName: the journal records each device tool
// (and the relay's devices.list) under its own name, never as "other".
func TestEveryServedToolHasItsOwnName(t *testing.T) {
	served := toolspec.Tools()
	for _, tool := range served {
		if got := sanitize(Event{Kind: KindToolCall, Tool: Tool(tool.Name)}).Tool; got != Tool(tool.Name) {
			t.Errorf("a %s call is journalled as %q", tool.Name, got)
		}
	}
	if len(tools) != len(served)+1 {
		t.Errorf("the journal knows %d tools; the table serves %d, and the relay devices.list", len(tools), len(served))
	}
}
