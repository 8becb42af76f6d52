package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/fileops"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/proclist"
	"github.com/commandcore/commandcore/internal/run"
	"github.com/commandcore/commandcore/internal/search"
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

// TestToolsCarryTitlesAndHints: every tool has a title (said once, not
// again in its annotations) and an
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
		if tool.Title == "" || a == nil || a.Title != "" || tool.OutputSchema == nil {
			t.Errorf("%s: title %q, annotations %+v, output schema %v", tool.Name, tool.Title, a, tool.OutputSchema != nil)
			continue
		}
		if a.ReadOnlyHint != readOnly[tool.Name] {
			t.Errorf("%s: readOnlyHint %v", tool.Name, a.ReadOnlyHint)
		}
		// A read-only tool leaves destructiveHint out: clients ignore it.
		switch {
		case readOnly[tool.Name] && a.DestructiveHint != nil:
			t.Errorf("%s: a read-only tool says destructiveHint %v", tool.Name, *a.DestructiveHint)
		case !readOnly[tool.Name] && (a.DestructiveHint == nil || *a.DestructiveHint != destructive[tool.Name]):
			t.Errorf("%s: destructiveHint %v, want %v", tool.Name, a.DestructiveHint, destructive[tool.Name])
		}
		if a.OpenWorldHint == nil || *a.OpenWorldHint {
			t.Errorf("%s: openWorldHint is not false", tool.Name)
		}
	}
}

// toolsListBudget is the most a device's tools/list result may weigh: every
// client loads it into each session before its first call.
const toolsListBudget = 24_500

// TestToolsListFitsItsBudget: the tools/list result, as it goes on the
// wire, stays within its budget.
func TestToolsListFitsItsBudget(t *testing.T) {
	live, err := Definitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(&mcp.ListToolsResult{Tools: live})
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > toolsListBudget {
		t.Errorf("tools/list is %d bytes, over its budget of %d", len(raw), toolsListBudget)
	}
}

// TestNoSchemaTypeIsAnArray: no schema a client is given, input or
// output, of the live registrations or of the relay's table, has at any
// depth a type that is an array (the MCP Inspector's type-union rule;
// singleTyped, toolresult.OutputSchema).
func TestNoSchemaTypeIsAnArray(t *testing.T) {
	live, err := Definitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var check func(at string, v any)
	check = func(at string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if types, ok := v["type"].([]any); ok {
				t.Errorf("%s: type %v", at, types)
			}
			for k, e := range v {
				check(at+"/"+k, e)
			}
		case []any:
			for i, e := range v {
				check(fmt.Sprintf("%s/%d", at, i), e)
			}
		}
	}
	for from, tools := range map[string][]*mcp.Tool{"registered": live, "relay's table": toolspec.Tools()} {
		for _, tool := range tools {
			for name, schema := range map[string]any{"inputSchema": tool.InputSchema, "outputSchema": tool.OutputSchema} {
				raw, err := json.Marshal(schema)
				if err != nil {
					t.Fatal(err)
				}
				var v any
				if err := json.Unmarshal(raw, &v); err != nil {
					t.Fatal(err)
				}
				check(from+" "+tool.Name+" "+name, v)
			}
		}
	}
}

// TestReferenceSchemasAreWhole: each tool's reference schema holds what
// its lean outputSchema leaves out (a nested field, a required field, a
// description), admits a failure's {error}, and refuses a result that
// breaks it where the lean one lets it pass; the lean one admits a
// failure and an empty result, every field that may be null null.
func TestReferenceSchemasAreWhole(t *testing.T) {
	live, err := Definitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	refs := ReferenceSchemas()
	if len(refs) != len(live) {
		t.Fatalf("%d reference schemas for %d tools", len(refs), len(live))
	}
	resolve := func(v any) *jsonschema.Resolved {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var s jsonschema.Schema
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		r, err := s.Resolve(nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	failure := map[string]any{"error": map[string]any{"code": "not_found", "message": "no such job"}}
	empty := map[string]any{
		"system.metrics": metrics.Metrics{}, "process.list": proclist.Result{}, "process.start": jobs.StartResult{},
		"process.status": jobmeta.Record{}, "process.output": jobs.Output{}, "process.input": jobs.InputResult{},
		"process.resize": jobs.ResizeResult{}, "process.screen": jobs.ScreenResult{}, "process.stop": jobmeta.Record{},
		"process.wait": jobs.WaitResult{}, "process.jobs": JobList{}, "files.search": search.Result{},
		"files.read": fileops.ReadResult{}, "files.write": fileops.WriteResult{}, "files.edit": fileops.EditResult{},
		"files.list": fileops.ListResult{}, "process.run": run.Result{}, "process.forget": Forgotten{},
	}
	for _, tool := range live {
		ref, lean := resolve(refs[tool.Name]), resolve(tool.OutputSchema)
		if err := ref.Validate(failure); err != nil {
			t.Errorf("%s: the reference schema refuses a failure: %v", tool.Name, err)
		}
		if err := lean.Validate(failure); err != nil {
			t.Errorf("%s: the listed schema refuses a failure: %v", tool.Name, err)
		}
		result, ok := empty[tool.Name]
		if !ok {
			t.Errorf("%s: no empty result to hold to its schemas", tool.Name)
			continue
		}
		raw, err := json.Marshal(result)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		json.Unmarshal(raw, &v)
		if err := lean.Validate(v); err != nil {
			t.Errorf("%s: the listed schema refuses %s: %v", tool.Name, raw, err)
		}
	}
	status := resolve(refs["process.status"])
	lean := resolve(toolNamed(t, live, "process.status").OutputSchema)
	// A record whose capture counters lack a stream: the listed schema
	// only knows capture is an object.
	broken := map[string]any{
		"process_id": "7d3c9f2e-0000-4000-8000-000000000000", "state": "running", "terminal": false,
		"created_at": "2026-12-04T00:00:00Z", "started_at": nil, "completed_at": nil, "reconciled_at": nil,
		"exit_code": nil, "read": false, "schema": 1, "capture": map[string]any{"stdout": map[string]any{}},
	}
	if err := lean.Validate(broken); err != nil {
		t.Errorf("the listed schema refuses what it only types: %v", err)
	}
	if status.Validate(broken) == nil {
		t.Error("the reference schema admits capture counters without stderr")
	}
	delete(broken, "capture")
	if err := status.Validate(broken); err != nil {
		t.Errorf("the reference schema refuses a record without capture: %v", err)
	}
	delete(broken, "state")
	if status.Validate(broken) == nil {
		t.Error("the reference schema admits a record without its state")
	}
	var desc string
	if p := refs["process.status"].AnyOf[0].Properties["state"]; p != nil {
		desc = p.Description
	}
	if desc == "" {
		t.Error("the reference schema does not describe process.status's state")
	}
}

func toolNamed(t *testing.T, tools []*mcp.Tool, name string) *mcp.Tool {
	t.Helper()
	for _, tool := range tools {
		if tool.Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

// TestRequiredArgumentsAreNotNullable: what an input schema requires, it
// does not offer as null (the decoder refuses a required array given as
// null): process_ids and edits are arrays, full stop, and no required
// argument of any tool, at any depth, admits null.
func TestRequiredArgumentsAreNotNullable(t *testing.T) {
	live, err := Definitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var check func(tool, at string, s map[string]any)
	check = func(tool, at string, s map[string]any) {
		props, _ := s["properties"].(map[string]any)
		required, _ := s["required"].([]any)
		for _, r := range required {
			p, _ := props[r.(string)].(map[string]any)
			if types, ok := p["type"].([]any); ok && slices.Contains(types, any("null")) {
				t.Errorf("%s: required %s%s is typed %v", tool, at, r, types)
			}
		}
		for name, p := range props {
			if m, ok := p.(map[string]any); ok {
				check(tool, at+name+".", m)
				if items, ok := m["items"].(map[string]any); ok {
					check(tool, at+name+"[].", items)
				}
			}
		}
	}
	types := map[string]any{}
	for _, tool := range live {
		raw, _ := json.Marshal(tool.InputSchema)
		var s map[string]any
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		check(tool.Name, "", s)
		props, _ := s["properties"].(map[string]any)
		for _, name := range []string{"process_ids", "edits"} {
			if p, ok := props[name].(map[string]any); ok {
				types[name] = p["type"]
			}
		}
	}
	if types["process_ids"] != "array" || types["edits"] != "array" {
		t.Fatalf("process_ids and edits are typed %v", types)
	}
}
