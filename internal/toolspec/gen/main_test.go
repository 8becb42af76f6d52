package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/tools"
)

// TestReferenceMatchesLiveTools: docs/tools.md is what the generator
// writes from this build's registrations. If this fails, run `make docs`.
func TestReferenceMatchesLiveTools(t *testing.T) {
	defs, err := tools.Definitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want, err := reference(documented(defs))
	if err != nil {
		t.Fatal(err)
	}
	// Tests run in this directory, go generate in its parent.
	got, err := os.ReadFile(filepath.Join("..", docPath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("docs/tools.md is stale; run make docs")
	}
	for _, d := range defs {
		if !bytes.Contains(got, []byte("\n## "+d.Name+"\n")) {
			t.Errorf("docs/tools.md has no section for %s", d.Name)
		}
	}
}

// TestReferenceShowsEverySchemaPart: a title, hints, nested and enumerated
// arguments, and an output schema, once a registration carries them.
func TestReferenceShowsEverySchemaPart(t *testing.T) {
	tool := &mcp.Tool{
		Name:        "process.resize",
		Title:       "Resize a terminal",
		Description: "Resize a | job's\nterminal.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: map[string]any{
			"type":     "object",
			"required": []any{"process_id"},
			"properties": map[string]any{
				"process_id": map[string]any{"type": "string", "description": "the job"},
				"mode":       map[string]any{"type": "string", "enum": []any{"any", "all"}},
				"pty": map[string]any{"type": []any{"null", "object"}, "properties": map[string]any{
					"cols": map[string]any{"type": "integer", "description": "1-1000"},
				}},
				"env": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
			},
		},
		OutputSchema: map[string]any{
			"type":     "object",
			"required": []any{"state"},
			"properties": map[string]any{
				"state": map[string]any{"type": "string", "description": "the job's state"},
			},
		},
	}
	doc, err := reference([]*mcp.Tool{tool})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"- [`process.resize`](#processresize): Resize a | job's terminal.\n",
		"\n## process.resize\n\n**Resize a terminal.** Resize a | job's terminal.\n",
		"Hints: `idempotentHint: false`, `readOnlyHint: true`.\n",
		"| `process_id` | string | yes | the job |\n| `env` | object of string | no |  |\n| `mode` | one of `any`, `all` | no |  |\n| `pty` | object or null | no |  |\n| `pty.cols` | integer | no | 1-1000 |\n",
		"**Output.**\n\n| field | type | required | description |\n|---|---|---|---|\n| `state` | string | yes | the job's state |\n",
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("the reference lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(string(doc), "no output schema") {
		t.Error("a tool with an output schema is described as having none")
	}
}
