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

// TestToolsCarryTitlesAndHints: every tool has a title and an
// outputSchema, and its annotations say what docs/tools.md says of it: read-only
// for those that change nothing, destructive for those that end or delete,
// and never open-world.
func TestToolsCarryTitlesAndHints(t *testing.T) {
	readOnly := map[string]bool{
		"process.status": true, "process.output": true, "process.jobs": true, "process.wait": true, "process.screen": true,
		"process.list": true, "system.metrics": true, "files.search": true, "files.read": true, "files.list": true,
	}
	destructive := map[string]bool{"process.stop": true, "process.forget": true, "files.write": true, "files.edit": true}
	live, err := Definitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range live {
		a := tool.Annotations
		if tool.Title == "" || a == nil || a.Title != tool.Title || tool.OutputSchema == nil {
			t.Errorf("%s: title %q, annotations %+v, output schema %v", tool.Name, tool.Title, a, tool.OutputSchema != nil)
			continue
		}
		if a.ReadOnlyHint != readOnly[tool.Name] {
			t.Errorf("%s: readOnlyHint %v", tool.Name, a.ReadOnlyHint)
		}
		if a.DestructiveHint == nil || *a.DestructiveHint != destructive[tool.Name] {
			t.Errorf("%s: destructiveHint %v, want %v", tool.Name, a.DestructiveHint, destructive[tool.Name])
		}
		if a.OpenWorldHint == nil || *a.OpenWorldHint {
			t.Errorf("%s: openWorldHint is not false", tool.Name)
		}
	}
}
