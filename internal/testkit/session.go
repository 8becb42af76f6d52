package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/relay/relaytest"
)

// Stdio is the transport to `commandcore mcp` run as cmd (which the SDK
// starts, and ends when the session closes).
func Stdio(cmd *exec.Cmd) mcp.Transport { return &mcp.CommandTransport{Command: cmd} }

// Relayed is the transport to a relay's MCP endpoint (base URL plus a
// path such as /mcp/<device>) with a client token.
func Relayed(endpoint, token string) mcp.Transport {
	return &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: relaytest.HTTPClient(token)}
}

// Connect opens an MCP session over t as the client name; opts may be nil.
func Connect(ctx context.Context, name string, t mcp.Transport, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, opts)
	return c.Connect(ctx, t, nil)
}

// Call invokes a tool and returns its structured content as JSON and
// whether it was an error result; err is a protocol error.
func Call(ctx context.Context, s *mcp.ClientSession, tool string, args any) (json.RawMessage, bool, error) {
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return nil, false, fmt.Errorf("%s: protocol error: %w", tool, err)
	}
	raw, err := json.Marshal(res.StructuredContent)
	return raw, res.IsError, err
}

// DecodeResult turns a successful tool call's result into out (when not
// nil); a protocol error or an isError result is an error. It takes the
// SDK's result as is, so a caller can time exactly the round trip.
func DecodeResult(tool string, res *mcp.CallToolResult, err error, out any) error {
	if err != nil {
		return fmt.Errorf("%s: %w", tool, err)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("%s failed: %s", tool, raw)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s: decode %s: %w", tool, raw, err)
	}
	return nil
}

// ErrorCode returns the code and message of an error result's structured
// content; a result without a code is an error.
func ErrorCode(raw json.RawMessage) (code, message string, err error) {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.Error.Code == "" {
		return "", "", fmt.Errorf("error result without code: %s", raw)
	}
	return e.Error.Code, e.Error.Message, nil
}
