package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Timeouts of the test wrappers: opening a session, one tool call.
const (
	ConnectTimeout = 20 * time.Second
	CallTimeout    = 60 * time.Second
)

// Client is an MCP session bound to a test: a protocol error, or a result
// other than the one asked for, fails the test.
type Client struct {
	TB      testing.TB
	Session *mcp.ClientSession
	// outputs are the listed tools' output schemas: every structured
	// result is validated against its tool's, as a client that checks
	// them (the TypeScript SDK does) would.
	outputs map[string]*jsonschema.Resolved
	// references are the whole result schemas of References, which hold a
	// result to every nested field, type and required field its docs name.
	references map[string]*jsonschema.Resolved
}

// References, when a test package sets it (to tools.ReferenceSchemas(),
// say), holds every structured result to its tool's whole schema as well
// as to the lean one tools/list carries.
var References map[string]*jsonschema.Schema

// Dial opens a session over t within ConnectTimeout and closes it when the
// test ends. A connection failure is returned, for tests that expect one.
func Dial(tb testing.TB, name string, t mcp.Transport, opts *mcp.ClientOptions) (*Client, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ConnectTimeout)
	defer cancel()
	s, err := Connect(ctx, name, t, opts)
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { s.Close() })
	c := &Client{TB: tb, Session: s, outputs: map[string]*jsonschema.Resolved{}, references: map[string]*jsonschema.Resolved{}}
	for tool, schema := range References {
		if c.references[tool], err = schema.Resolve(nil); err != nil {
			return nil, fmt.Errorf("%s: reference schema: %w", tool, err)
		}
	}
	for tool, err := range s.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		if tool.OutputSchema == nil || tool.Title == "" || tool.Annotations == nil {
			return nil, fmt.Errorf("tool %s is listed without an outputSchema, a title or annotations", tool.Name)
		}
		raw, err := json.Marshal(tool.OutputSchema)
		if err != nil {
			return nil, err
		}
		var schema jsonschema.Schema
		if err := json.Unmarshal(raw, &schema); err != nil {
			return nil, fmt.Errorf("%s: output schema: %w", tool.Name, err)
		}
		if c.outputs[tool.Name], err = schema.Resolve(nil); err != nil {
			return nil, fmt.Errorf("%s: output schema: %w", tool.Name, err)
		}
	}
	return c, nil
}

// Call invokes a tool and returns its structured content as JSON and
// whether it was an error result.
func (c *Client) Call(tool string, args any) (json.RawMessage, bool) {
	c.TB.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	raw, isErr, err := Call(ctx, c.Session, tool, args)
	if err != nil {
		c.TB.Fatal(err)
	}
	c.Check(tool, raw)
	return raw, isErr
}

// Check holds a tool's structured content to the tool's listed
// outputSchema and to its whole schema, when References has it.
func (c *Client) Check(tool string, raw json.RawMessage) {
	c.TB.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		c.TB.Fatalf("%s: structured content is not JSON: %v", tool, err)
	}
	if schema := c.outputs[tool]; schema != nil {
		if err := schema.Validate(v); err != nil {
			c.TB.Fatalf("%s: the result does not match the tool's outputSchema: %v\n%s", tool, err, raw)
		}
	}
	if schema := c.references[tool]; schema != nil {
		if err := schema.Validate(v); err != nil {
			c.TB.Fatalf("%s: the result does not match the tool's reference schema: %v\n%s", tool, err, raw)
		}
	}
}

// OK calls a tool that must succeed and decodes its result into out (when
// not nil).
func (c *Client) OK(tool string, args any, out any) {
	c.TB.Helper()
	raw, isErr := c.Call(tool, args)
	if isErr {
		c.TB.Fatalf("%s failed: %s", tool, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.TB.Fatalf("%s: decode %s: %v", tool, raw, err)
		}
	}
}

// Fail calls a tool that must fail and returns its error code and message.
func (c *Client) Fail(tool string, args any) (string, string) {
	c.TB.Helper()
	raw, isErr := c.Call(tool, args)
	if !isErr {
		c.TB.Fatalf("%s succeeded, want an error: %s", tool, raw)
	}
	code, msg, err := ErrorCode(raw)
	if err != nil {
		c.TB.Fatalf("%s: %v", tool, err)
	}
	return code, msg
}
