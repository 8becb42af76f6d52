// Package toolspec is the table of device tools (docs/tools.md) as a client
// sees them: names, descriptions, input schemas, and whatever else a tool
// definition carries. The relay serves its tool definitions from here,
// never from a connected device, and does so without linking the job core.
//
// tools.json is generated from the live registrations in package tools;
// a test there fails when the two differ.
package toolspec

//go:generate go run ./gen

import (
	_ "embed"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/strictjson"
)

// maxTableBytes bounds a tool table; the embedded one is a few KiB.
const maxTableBytes = 1 << 20

//go:embed tools.json
var table []byte

// Tools returns the table's tools in order, fresh copies on each call so a
// caller may change them. It panics if the embedded table is broken, which
// the package's tests rule out.
func Tools() []*mcp.Tool {
	ts, err := Parse(table)
	if err != nil {
		panic(fmt.Sprintf("toolspec: embedded table: %v", err))
	}
	return ts
}

// Parse decodes a tool table strictly: one JSON array of tool definitions
// without unknown fields, each with a name of its own and an input schema
// that is a JSON object of type "object".
func Parse(data []byte) ([]*mcp.Tool, error) {
	var ts []*mcp.Tool
	switch err := strictjson.Decode(data, &ts, maxTableBytes, strictjson.AnyValue); {
	case errors.Is(err, strictjson.ErrTrailing):
		return nil, errors.New("trailing data after the table")
	case err != nil:
		return nil, fmt.Errorf("not a JSON array of tool definitions: %w", err)
	}
	seen := map[string]bool{}
	for i, t := range ts {
		if t == nil || t.Name == "" {
			return nil, fmt.Errorf("tool %d has no name", i)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("tool %q is defined twice", t.Name)
		}
		seen[t.Name] = true
		if s, ok := t.InputSchema.(map[string]any); !ok || s["type"] != "object" {
			return nil, fmt.Errorf("tool %q: the input schema is not an object schema", t.Name)
		}
	}
	return ts, nil
}
