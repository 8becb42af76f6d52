package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/testkit"
)

// callSize calls a tool and returns its result with the size of the whole
// result (text and structured content together, as the response carries
// them) and of its text content alone. The _meta and resultType the newest
// protocol revision adds to every result (the SDK's, ~100 bytes) are not
// counted: clients of earlier revisions never see them.
func (c *client) callSize(tool string, args any) (res *mcp.CallToolResult, whole, text int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.CallTimeout)
	defer cancel()
	res, err := c.session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		c.t.Fatal(err)
	}
	raw, err := json.Marshal(struct {
		Content           []mcp.Content `json:"content"`
		StructuredContent any           `json:"structuredContent"`
		IsError           bool          `json:"isError,omitempty"`
	}{res.Content, res.StructuredContent, res.IsError})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			text += len(tc.Text)
		}
	}
	return res, len(raw), text
}

// TestResultsAreCompact: process.start of echo hello with wait_ms answers
// in at most 900 bytes, 300 of them text; process.output of a finished
// 3-line job in at most 700. An unhealthy host adds its reasons to a
// start's host_health, beyond that budget.
func TestResultsAreCompact(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	res, whole, text := c.callSize("process.start", map[string]any{"command": "echo hello", "wait_ms": 5000})
	var start jobs.StartResult
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &start); err != nil || start.ExitCode == nil || *start.ExitCode != 0 || start.Output == nil || start.Output.Stdout.Data != "hello\n" {
		t.Fatalf("process.start's result lacks the end or the output: %s", raw)
	}
	summary := res.Content[0].(*mcp.TextContent).Text
	if !strings.Contains(summary, start.ProcessID) || !strings.Contains(summary, "exited 0") || !strings.Contains(summary, "hello") {
		t.Errorf("text content %q lacks the job, its end or its output", summary)
	}
	budget := 900
	if h := start.HostHealth; h != nil && h.Verdict != "ok" {
		extra, _ := json.Marshal(h)
		budget += 2 * len(extra)
		t.Logf("host is %s: budget raised by %d bytes", h.Verdict, 2*len(extra))
	}
	t.Logf("process.start: %d bytes, %d of them text", whole, text)
	if whole > budget || text > 300 {
		t.Errorf("process.start answered %d bytes (%d text), want at most %d (300): %s", whole, text, budget, raw)
	}

	id := c.start(map[string]any{"command": "printf 'one\\ntwo\\nthree\\n'", "wait_ms": 5000}).ProcessID
	res, whole, _ = c.callSize("process.output", map[string]any{"process_id": id})
	raw, _ = json.Marshal(res)
	if whole > 700 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "one\ntwo\nthree\n") {
		t.Errorf("process.output of 3 lines answered %d bytes, want at most 700: %s", whole, raw)
	}
}

// TestServerSendsInstructions: a client learns how the tools fit together
// from the initialize result.
func TestServerSendsInstructions(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	ins := c.session.InitializeResult().Instructions
	for _, tool := range []string{"process.start", "process.output", "process.input", "process.wait", "process.forget", "process.run"} {
		if !strings.Contains(ins, tool) {
			t.Errorf("instructions do not mention %s: %q", tool, ins)
		}
	}
}
