package toolspec

import "github.com/modelcontextprotocol/go-sdk/mcp"

// Instructions is what every CommandCore MCP server tells a model, in its
// initialize result, about how the tools fit together.
const Instructions = `CommandCore runs shell work on one Linux machine. For a short command (under a minute), use process.run: it returns the exit code and output. For anything longer, or that must outlive this session: process.start returns a process_id at once (wait_ms: up to 30 s for a quick job's whole result; give an idempotency_key so a retried start cannot launch twice); then read output with process.output (offsets; wait_ms long-polls), send input with process.input to a job started with stdin: true or pty (wait_ms returns the answer; until: a prompt such as ">>> " returns as soon as it appears), read a full-screen program on a pty (top, vim, less) with process.screen, block until it ends with process.wait (up to 600 s; until: output text, a listening port or a path, instead of polling), stop it with process.stop, and delete a finished job with process.forget once its output is read. Jobs keep running if this connection drops; process.jobs lists them. Output is kept as head and tail (gaps are reported), 64 KiB a page by default; input is at most 64 KiB a call. files.search finds files by name or text. Errors carry a stable code (not_found, invalid_argument, ...) in structuredContent.error.`

// Capabilities are what every CommandCore MCP server declares besides its
// tools: logging, the SDK's default, and prompts and resources, none of
// each, since the SDK answers prompts/list and resources/list (revision
// 2026-07-28's server/discover must declare what a server answers).
func Capabilities() *mcp.ServerCapabilities {
	return &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}, Prompts: &mcp.PromptCapabilities{}, Resources: &mcp.ResourceCapabilities{}}
}
