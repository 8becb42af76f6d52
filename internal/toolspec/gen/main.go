// Command gen writes the relay's tool table (tools.json) and the tool
// reference (docs/tools.md) from the live tool registrations:
// `go generate ./internal/toolspec`, or `make docs`.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/tools"
)

// The outputs, relative to internal/toolspec, where go generate runs.
const (
	tablePath = "tools.json"
	docPath   = "../../docs/tools.md"
)

func main() {
	if err := generate(); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func generate() error {
	defs, err := tools.Definitions(context.Background())
	if err != nil {
		return err
	}
	table, err := json.MarshalIndent(defs, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the tool table: %w", err)
	}
	if err := os.WriteFile(tablePath, append(table, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the tool table: %w", err)
	}
	doc, err := reference(documented(defs))
	if err != nil {
		return err
	}
	if err := os.WriteFile(docPath, doc, 0o644); err != nil {
		return fmt.Errorf("write the tool reference: %w", err)
	}
	return nil
}

// documented is defs with each tool's whole result schema in place of the
// lean outputSchema tools/list carries: the reference documents every
// field a result may hold.
func documented(defs []*mcp.Tool) []*mcp.Tool {
	refs := tools.ReferenceSchemas()
	out := make([]*mcp.Tool, len(defs))
	for i, t := range defs {
		c := *t
		if ref, ok := refs[t.Name]; ok {
			c.OutputSchema = ref
		}
		out[i] = &c
	}
	return out
}
