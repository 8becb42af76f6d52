// Package toolresult shapes MCP tool results the way the README promises:
// structured content on success, and on failure isError with
// structuredContent.error = {code, message}. The agent's tools and the
// relay's forwarding both answer through it, so a client sees one shape.
package toolresult

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/errcode"
)

// ErrorResult is the structured content of a failed call.
type ErrorResult struct {
	Error *errcode.Error `json:"error"`
}

// Success wraps a structured result; its text content is the result's
// compact JSON, with <, > and & as they are: a model reads the text, and
// escaped each would take six characters of it (a line of code found by
// files.search, say).
func Success(out any) *mcp.CallToolResult {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return Failure(fmt.Errorf("encode result: %w", err))
	}
	return Summarized(out, strings.TrimSuffix(b.String(), "\n"))
}

// Summarized wraps a structured result with a text content of its own: a
// short summary for a model, so the text does not repeat the structured
// content in full.
func Summarized(out any, text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: text}},
		StructuredContent: out,
	}
}

// Failure turns an error into an isError result with a stable code.
func Failure(err error) *mcp.CallToolResult {
	e := errcode.From(err)
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: string(e.Code) + ": " + e.Message}},
		StructuredContent: ErrorResult{Error: e},
	}
}
