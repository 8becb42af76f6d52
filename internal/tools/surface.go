package tools

import (
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// hint is what a tool's annotations tell a client about its effects.
type hint int

const (
	// changes: the tool changes something, but nothing it cannot undo or
	// that was not asked for (a launch, input).
	changes hint = iota
	// readOnly: the tool changes nothing.
	readOnly
	// destructive: the tool ends or deletes something.
	destructive
)

// surface gives every tool its title and effect (SPEC §3). A tool
// registered without an entry here panics at registration, so the table
// cannot fall behind.
var surface = map[string]struct {
	title  string
	effect hint
}{
	"system.metrics": {"Host metrics", readOnly},
	"process.list":   {"List host processes", readOnly},
	"process.start":  {"Start a managed job", changes},
	"process.status": {"Job status", readOnly},
	"process.output": {"Read job output", readOnly},
	"process.input":  {"Send input to a job", changes},
	"process.resize": {"Resize a job's terminal", changes},
	"process.stop":   {"Stop a job", destructive},
	"process.wait":   {"Wait for jobs to end", readOnly},
	"process.jobs":   {"List managed jobs", readOnly},
	"files.search":   {"Search files", readOnly},
	"files.read":     {"Read a file", readOnly},
	"files.write":    {"Write a file", destructive},
	"files.edit":     {"Edit a file", destructive},
	"files.list":     {"List a directory", readOnly},
	"process.run":    {"Run a short command", changes},
	"process.forget": {"Forget a finished job", destructive},
}

// annotate sets a tool's title and annotations from the surface table.
// No tool reaches beyond this machine: openWorldHint is false for all.
func annotate(t *mcp.Tool) {
	s, ok := surface[t.Name]
	if !ok {
		panic(fmt.Sprintf("tool %s has no title or annotations in surface.go", t.Name))
	}
	closed, destroys := false, s.effect == destructive
	t.Title = s.title
	t.Annotations = &mcp.ToolAnnotations{
		Title:           s.title,
		ReadOnlyHint:    s.effect == readOnly,
		IdempotentHint:  s.effect == readOnly,
		DestructiveHint: &destroys,
		OpenWorldHint:   &closed,
	}
}
