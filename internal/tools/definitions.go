package tools

import (
	"context"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/version"
)

// Definitions returns the tool definitions a client of this build's
// device sees in tools/list (names, descriptions, input schemas and
// whatever else a registration carries), in listing order. They are read
// over a real MCP session from a server with the live registrations; no
// tool is called, so the service behind them is empty.
func Definitions(ctx context.Context) ([]*mcp.Tool, error) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "commandcore", Version: version.Version}, nil)
	Register(srv, &jobs.Service{}, &Host{}, nil)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		return nil, fmt.Errorf("connect the tool server: %w", err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "definitions", Version: version.Version}, nil).Connect(ctx, ct, nil)
	if err != nil {
		return nil, fmt.Errorf("connect to the tool server: %w", err)
	}
	defer cs.Close()
	var out []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		out = append(out, t)
	}
	return out, nil
}

// ReferenceSchemas returns each tool's whole result schema by name: every
// nested field with its description and what is required, where
// tools/list carries a lean one (toolresult.OutputSchema). docs/tools.md
// documents these, and the tests hold every result to them.
func ReferenceSchemas() map[string]*jsonschema.Schema {
	r := registrar{srv: mcp.NewServer(&mcp.Implementation{Name: "commandcore", Version: version.Version}, nil), references: map[string]*jsonschema.Schema{}}
	for _, d := range table(&jobs.Service{}, &Host{}) {
		d.add(r, d)
	}
	return r.references
}
