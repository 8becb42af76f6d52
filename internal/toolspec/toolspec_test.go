package toolspec

import (
	"encoding/json"
	"testing"
)

func TestTableHasTheDeviceTools(t *testing.T) {
	got := map[string]bool{}
	for _, tool := range Tools() {
		got[tool.Name] = true
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
	}
	// The tools this build serves.
	for _, name := range []string{"process.start", "process.status", "process.output", "process.stop", "process.jobs",
		"process.forget", "process.run", "process.list", "system.metrics", "files.search", "process.wait", "process.input", "process.resize",
		"files.read", "files.write", "files.edit", "files.list"} {
		if !got[name] {
			t.Errorf("the table lacks %s", name)
		}
	}
}

func TestToolsAreFreshCopies(t *testing.T) {
	a := Tools()
	a[0].Description = "changed"
	a[0].InputSchema.(map[string]any)["type"] = "changed"
	b := Tools()
	if b[0].Description == "changed" || b[0].InputSchema.(map[string]any)["type"] != "object" {
		t.Fatal("a caller's change reached the table")
	}
}

func TestParseRefusesBrokenTables(t *testing.T) {
	for _, bad := range []string{
		``, `{}`, `[null]`, `[{}]`, `[] []`,
		`[{"name":"a","inputSchema":{"type":"object"},"surprise":1}]`,
		`[{"name":"a","inputSchema":{"type":"string"}}]`,
		`[{"name":"a"}]`,
		`[{"name":"a","inputSchema":{"type":"object"}},{"name":"a","inputSchema":{"type":"object"}}]`,
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	ts, err := Parse([]byte(`[{"name":"a","description":"d","inputSchema":{"type":"object"}}]`))
	if err != nil || len(ts) != 1 || ts[0].Name != "a" || ts[0].Description != "d" {
		t.Fatalf("Parse: %v %v", ts, err)
	}
}

func FuzzParse(f *testing.F) {
	// One real tool, not the whole table: the table is over 100 KiB, and
	// the fuzzer's minimisation of inputs that size stalls the run.
	one, err := json.Marshal(Tools()[:1])
	if err != nil {
		f.Fatal(err)
	}
	f.Add(one)
	f.Add([]byte(`[{"name":"a","inputSchema":{"type":"object"}}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, err := Parse(data)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, tool := range ts {
			if tool.Name == "" || seen[tool.Name] || tool.InputSchema.(map[string]any)["type"] != "object" {
				t.Fatalf("accepted %q", data)
			}
			seen[tool.Name] = true
		}
	})
}
