package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/testkit"
)

// callSize calls a tool and returns its result with the size of the whole
// result (text and structured content together, as the response carries
// them) and of its text content alone, held to the tool's schemas as every
// call is. The _meta and resultType the newest
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
	structured, err := json.Marshal(res.StructuredContent)
	if err != nil {
		c.t.Fatal(err)
	}
	c.kit.Check(tool, structured)
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

// TestTextFitsTheChatClients: every tool's text content at the tool's
// default bounds, with as much to say as those bounds let through, stays
// under limits.MaxToolTextChars (claude.ai cuts a result at about 150,000
// characters; a byte is at most one character, so bytes are counted). The
// job table is full (99 jobs retained, which a launch leaves, and 32
// live), outputs and files are larger than a page, lines and names as long
// as the tools keep them. Each tool also fails once, and every result,
// success or failure, is held to the tool's schemas. The sizes are logged
// (docs/limits.md records them).
func TestTextFitsTheChatClients(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	type size struct {
		tool             string
		text, structured int
	}
	var sizes []size
	measure := func(tool string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, _, text := c.callSize(tool, args)
		structured, _ := json.Marshal(res.StructuredContent)
		if res.IsError {
			t.Fatalf("%s failed: %s", tool, structured)
		}
		sizes = append(sizes, size{tool, text, len(structured)})
		if text >= limits.MaxToolTextChars {
			t.Errorf("%s: %d characters of text, want under %d", tool, text, limits.MaxToolTextChars)
		}
		return res
	}
	decode := func(res *mcp.CallToolResult, out any) {
		t.Helper()
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
	}
	const both = "seq 1 200000; seq 1 200000 >&2" // 1.2 MiB on each stream

	var big jobs.StartResult
	decode(measure("process.start", map[string]any{"command": both, "wait_ms": 30000}), &big)
	measure("process.output", map[string]any{"process_id": big.ProcessID})
	input := c.start(map[string]any{"command": "read x; " + both, "stdin": true}).ProcessID
	measure("process.input", map[string]any{"process_id": input, "data": "go\n", "wait_ms": 10000})
	// A 1000x1000 terminal written full, slower than a flood, so the
	// emulator draws every row.
	screen := c.start(map[string]any{"command": `i=0; while [ $i -lt 20 ]; do head -c 60000 /dev/zero | tr '\0' x; sleep 0.1; i=$((i+1)); done; exec sleep 600`,
		"pty": pty(limits.TerminalDimensionMax, limits.TerminalDimensionMax)}).ProcessID
	t.Cleanup(func() { c.stopAndWait(screen) })
	c.awaitScreen(screen, func(s jobs.ScreenResult) bool { return s.Truncated })
	measure("process.screen", map[string]any{"process_id": screen})
	measure("process.resize", map[string]any{"process_id": screen, "cols": 80, "rows": 24})
	// 97 more ended jobs, read, and 31 more live ones fill the table.
	for range limits.MaxRetainedTerminalJobs - 3 {
		c.start(map[string]any{"command": "true", "wait_ms": 10000})
	}
	live := []string{screen}
	for range limits.MaxLiveJobs - 1 {
		id := c.start(map[string]any{"command": "exec sleep 600"}).ProcessID
		t.Cleanup(func() { c.stopAndWait(id) })
		live = append(live, id)
	}
	var list struct {
		Jobs []record `json:"jobs"`
	}
	decode(measure("process.jobs", map[string]any{}), &list)
	if len(list.Jobs) != limits.MaxRetainedTerminalJobs-1+limits.MaxLiveJobs {
		t.Fatalf("process.jobs lists %d jobs, want a full table", len(list.Jobs))
	}
	measure("process.wait", map[string]any{"process_ids": live, "mode": "all", "timeout_ms": 0})
	measure("process.status", map[string]any{"process_id": big.ProcessID})
	measure("process.stop", map[string]any{"process_id": live[1]})
	measure("process.forget", map[string]any{"process_id": big.ProcessID})

	measure("process.run", map[string]any{"command": "seq 1 200000"})
	measure("process.list", map[string]any{})
	measure("system.metrics", map[string]any{})

	dir := t.TempDir()
	var text strings.Builder
	for i := 0; text.Len() < 2<<20; i++ {
		fmt.Fprintf(&text, "line %d: if a < b && c > d { return \"e\" }\n", i)
	}
	file := filepath.Join(dir, "big.txt")
	measure("files.write", map[string]any{"path": file, "content": text.String()})
	measure("files.read", map[string]any{"path": file})
	measure("files.edit", map[string]any{"path": file, "edits": []map[string]any{
		{"old_text": text.String()[:200_000], "new_text": strings.ToUpper(text.String()[:200_000])}}})
	// Lines longer than a match keeps, in files of names as long as they
	// go; entries of such names, more than a listing keeps.
	found := filepath.Join(dir, "found")
	os.Mkdir(found, 0o700)
	line := "needle " + strings.Repeat("x", 600) + "\n"
	for i := range 20 {
		name := fmt.Sprintf("%03d-%s", i, strings.Repeat("n", 251))
		if err := os.WriteFile(filepath.Join(found, name), []byte(strings.Repeat(line, 100)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	measure("files.search", map[string]any{"root": found, "text": "needle"})
	for i := range 300 {
		os.WriteFile(filepath.Join(found, fmt.Sprintf("%03d-%s.more", i, strings.Repeat("m", 246))), nil, 0o600)
	}
	measure("files.list", map[string]any{"path": found})

	measured := map[string]bool{}
	var table strings.Builder
	for _, s := range sizes {
		measured[s.tool] = true
		fmt.Fprintf(&table, "| %s | %d | %d |\n", s.tool, s.text, s.structured)
	}
	t.Logf("characters of text and bytes of structured content:\n%s", table.String())
	for tool, err := range c.session.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if !measured[tool.Name] {
			t.Errorf("%s is not measured", tool.Name)
		}
		if code, _ := c.fail(tool.Name, map[string]any{"bogus": 1}); code != "invalid_argument" {
			t.Errorf("%s with an unknown argument: %s", tool.Name, code)
		}
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
