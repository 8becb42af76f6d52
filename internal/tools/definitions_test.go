package tools

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/commandcore/commandcore/internal/toolspec"
)

// TestRelayTableMatchesLiveTools: the relay serves its tool definitions
// from toolspec's table, so the table must be what this build's devices
// register. If this fails, run `go generate ./internal/toolspec`.
func TestRelayTableMatchesLiveTools(t *testing.T) {
	live, err := Definitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	asJSON := func(v any) any {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var out any
		json.Unmarshal(raw, &out)
		return out
	}
	table := toolspec.Tools()
	byName := map[string]any{}
	for _, tool := range table {
		byName[tool.Name] = asJSON(tool)
	}
	for _, tool := range live {
		want, ok := byName[tool.Name]
		if !ok {
			t.Errorf("%s is registered but not in the relay's table; run go generate ./internal/toolspec", tool.Name)
			continue
		}
		if got := asJSON(tool); !reflect.DeepEqual(got, want) {
			t.Errorf("%s differs from the relay's table; run go generate ./internal/toolspec", tool.Name)
		}
		delete(byName, tool.Name)
	}
	for name := range byName {
		t.Errorf("%s is in the relay's table but not registered; run go generate ./internal/toolspec", name)
	}
}
