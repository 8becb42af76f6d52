// Package tools serves the job core as MCP tools (docs/tools.md). Inputs are
// decoded strictly here, so an unknown or mistyped argument becomes an
// invalid_argument tool error instead of being ignored.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/owndirs"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/proclist"
	"github.com/commandcore/commandcore/internal/run"
	"github.com/commandcore/commandcore/internal/strictjson"
	"github.com/commandcore/commandcore/internal/textenc"
	"github.com/commandcore/commandcore/internal/toolresult"
)

// IDRequest names one job.
type IDRequest struct {
	ProcessID string `json:"process_id" jsonschema:"the job's process_id"`
}

// NoArgs is the input of tools without arguments.
type NoArgs struct{}

// JobList is process.jobs's result.
type JobList struct {
	Jobs []jobmeta.Summary `json:"jobs" jsonschema:"the managed jobs this caller sees, newest first"`
}

// Forgotten is process.forget's result.
type Forgotten struct {
	ProcessID string `json:"process_id" jsonschema:"the job's ID"`
	Forgotten bool   `json:"forgotten" jsonschema:"true: its metadata and output are deleted"`
}

// Host holds the host-insight engines the tools use, and the agent's own
// directories, which no tool reaches.
type Host struct {
	Metrics   *metrics.Source
	Processes *proclist.Lister
	Own       *owndirs.Set
	// ConfigDir holds the owner's permissions.json, which until.path
	// answers to as files.list does; empty: no ceiling applies.
	ConfigDir string
}

// NewHost returns the engines over the proc file system at procRoot, kept
// out of ownDirs (the agent's config and state directories); process.list's
// managed filter selects the jobs of svc.
func NewHost(procRoot string, svc *jobs.Service, ownDirs ...string) (*Host, error) {
	m, err := metrics.NewSource(procRoot)
	if err != nil {
		return nil, err
	}
	p, err := proclist.New(procRoot, proclist.Agent{DeviceID: svc.DeviceID(), JobsDir: svc.JobsDir()})
	if err != nil {
		return nil, err
	}
	own, err := owndirs.New(ownDirs...)
	if err != nil {
		return nil, err
	}
	return &Host{Metrics: m, Processes: p, Own: own}, nil
}

// Register adds the tools this build serves (docs/tools.md) to srv.
func Register(srv *mcp.Server, svc *jobs.Service, host *Host, gate Gate) {
	r := registrar{srv: srv, journal: svc.Journal(), gate: gate}
	for _, d := range table(svc, host) {
		d.add(r, d)
	}
}

// Gate decides whether a call may run at all, before its arguments are
// read, and for whom: over the link it checks the server's grant, which
// names the principal, and on every server the owner's permission ceiling.
// A nil Gate admits every call as principal.Local.
type Gate func(ctx context.Context, req *mcp.CallToolRequest, tool string) (principal.Principal, error)

// Call is what a tool handler knows of its call besides the arguments.
type Call struct {
	Req *mcp.CallToolRequest
	// Who is the principal the call acts for: jobs are theirs.
	Who principal.Principal
}

// registrar carries what every registered tool shares.
type registrar struct {
	srv     *mcp.Server
	journal *activity.Journal
	gate    Gate
	// references, when not nil, collects each tool's ReferenceSchema.
	references map[string]*jsonschema.Schema
}

// add registers a tool whose input is decoded strictly into In and whose
// result is an Out, with the title and annotations of its definition, an
// outputSchema from Out and text's summary as its text content.
func add[In, Out any](r registrar, d definition, h func(context.Context, Call, In) (Out, error), text func(Out) string) {
	name := d.name
	schema, err := jsonschema.For[In](&jsonschema.ForOptions{TypeSchemas: oneOfShapes()})
	if err != nil {
		panic(fmt.Sprintf("schema for %s: %v", name, err))
	}
	singleTyped(schema)
	output, err := toolresult.OutputSchema[Out]()
	if err != nil {
		panic(fmt.Sprintf("output schema for %s: %v", name, err))
	}
	if r.references != nil {
		if r.references[name], err = toolresult.ReferenceSchema[Out](); err != nil {
			panic(fmt.Sprintf("reference schema for %s: %v", name, err))
		}
	}
	tool := &mcp.Tool{Name: name, Description: d.desc, InputSchema: schema, OutputSchema: output}
	d.annotate(tool)
	r.srv.AddTool(tool,
		func(ctx context.Context, req *mcp.CallToolRequest) (res *mcp.CallToolResult, _ error) {
			began := time.Now()
			defer func() {
				// One failing call must not take the server and every other
				// client's session down with it.
				if p := recover(); p != nil {
					res = toolresult.Failure(fmt.Errorf("tool %s panicked: %v", name, p))
				}
			}()
			var in In
			var out Out
			var err error
			who := principal.Local
			if r.gate != nil {
				who, err = r.gate(ctx, req, name)
			}
			if err == nil {
				err = Decode(req.Params.Arguments, &in)
			}
			if err == nil {
				out, err = h(ctx, Call{Req: req, Who: who}, in)
			}
			r.journal.Record(activity.ToolCallEvent(activity.Tool(name), jobIDOf(in, out), time.Since(began), err))
			switch {
			case err != nil:
				return toolresult.Failure(err), nil
			case text != nil:
				return toolresult.Summarized(out, text(out)), nil
			}
			return toolresult.Success(out), nil
		})
}

// progressSender carries process.run's live output as progress
// notifications. It is called from one goroutine, in order; NotifyProgress
// blocking is what applies backpressure to the command.
func progressSender(ss *mcp.ServerSession, tok any) func(context.Context, run.Chunk) error {
	var sent int64
	return func(ctx context.Context, c run.Chunk) error {
		data, enc := run.EncodeChunk(c)
		if enc == textenc.Base64 {
			data = "base64:" + data
		}
		sent += int64(len(c.Data))
		return ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: tok,
			// Cumulative bytes of both streams: strictly increasing.
			Progress: float64(sent),
			Message:  data,
			Meta:     mcp.Meta{"stream": c.Stream, "offset": c.Offset, "encoding": enc, "bytes": len(c.Data)},
		})
	}
}

// jobIDOf returns the job a call was about, for the activity journal.
func jobIDOf(in, out any) string {
	switch v := in.(type) {
	case IDRequest:
		return v.ProcessID
	case jobs.OutputRequest:
		return v.ProcessID
	case jobs.InputRequest:
		return v.ProcessID
	case jobs.ResizeRequest:
		return v.ProcessID
	}
	if r, ok := out.(*jobs.StartResult); ok && r != nil {
		return r.ProcessID
	}
	return ""
}

// Decode decodes tool arguments strictly: unknown fields (also those that
// differ from the schema's only in case), repeated fields, wrong types and
// trailing data are invalid_argument errors that name the field at most.
// Only the top-level keys are matched exactly; nested maps (env) keep their
// own keys.
func Decode(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	// A frame bounds what reaches here; the bound is the frame's.
	if err := strictjson.Decode(raw, v, limits.MaxFrameBytes, strictjson.ExactKeys); err != nil {
		return errcode.New(errcode.InvalidArgument, "%s", describe(err, reflect.TypeOf(v)))
	}
	return nil
}

// maxFieldEcho bounds how much of a client-supplied field name is echoed.
const maxFieldEcho = 64

// describe says what is wrong with arguments decoded into a value of
// type into.
func describe(err error, into reflect.Type) string {
	var typ *json.UnmarshalTypeError
	var syn *json.SyntaxError
	var field *strictjson.FieldError
	switch {
	case errors.As(err, &field) && field.Repeated:
		return fmt.Sprintf("argument %q is given twice", clip(field.Field, maxFieldEcho))
	case errors.As(err, &field):
		return fmt.Sprintf("unknown argument %q", clip(field.Field, maxFieldEcho))
	case errors.Is(err, strictjson.ErrNotObject):
		return "arguments must be a JSON object"
	case errors.Is(err, strictjson.ErrTrailing):
		return "arguments must be one JSON object"
	case errors.As(err, &typ):
		if typ.Field == "" {
			return "arguments must be a JSON object"
		}
		want := typ.Type
		// The argument's own type when it is found: a map's or an
		// array's element alone would not say what the argument is.
		if t := argumentType(into, typ.Field); t != nil {
			want = t
		}
		return fmt.Sprintf("argument %q must be %s", clip(typ.Field, maxFieldEcho), jsonType(want))
	case errors.As(err, &syn):
		return "arguments are not valid JSON"
	}
	return "arguments could not be decoded"
}

// argumentType is the type of the argument at path (dotted JSON names)
// in a value of type t, or nil when the path names no struct field.
func argumentType(t reflect.Type, path string) reflect.Type {
	for _, name := range strings.Split(path, ".") {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == nil || t.Kind() != reflect.Struct {
			return nil
		}
		var next reflect.Type
		for i := range t.NumField() {
			f := t.Field(i)
			if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag == name {
				next = f.Type
				break
			}
		}
		t = next
	}
	return t
}

// oneOfShapes are the schemas of arguments that take more than one shape:
// until.output is the text alone or the long form. Built when tools are
// registered, never at package set-up, which every role of the binary runs.
func oneOfShapes() map[reflect.Type]*jsonschema.Schema {
	return map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[jobs.OutputUntil](): {AnyOf: []*jsonschema.Schema{
			{Type: "string", Description: "the text"},
			mustSchema[jobs.OutputUntil](),
		}},
	}
}

// mustSchema is T's inferred schema; T is a type of this package's tools.
func mustSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("schema for %T: %v", *new(T), err))
	}
	return s
}

// singleTyped takes null out of every type in s, at every depth, leaving
// each one type, or none beside an anyOf that says what is taken
// (until.output). The schema infers "null or array" for a Go slice and
// "null or object" for a pointer, but a required argument given as null
// is refused and an optional one is taken as absent, so no client needs
// null; and a type that is an array is what the MCP Inspector's
// type-union rule flags (core/json/schemaLint.ts): a client that
// translates a tool's schema into a dialect of single types, such as
// Gemini's function declarations, refuses the tool.
func singleTyped(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if types := slices.DeleteFunc(s.Types, func(t string) bool { return t == "null" }); len(types) == 1 {
		s.Type, s.Types = types[0], nil
	} else if len(types) == 0 {
		s.Types = nil
	}
	for _, p := range s.Properties {
		singleTyped(p)
	}
	for _, a := range s.AnyOf {
		singleTyped(a)
	}
	singleTyped(s.Items)
	singleTyped(s.AdditionalProperties)
}

// jsonType names the JSON a Go type decodes from, as a client writes it:
// a message never names a type of the implementation.
func jsonType(t reflect.Type) string {
	one, _ := jsonNames(t)
	return one
}

// jsonNames names one JSON value of type t and several, the elements of
// an array or an object named by their own.
func jsonNames(t reflect.Type) (one, many string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// A type that takes more than one shape says which.
	if w, ok := reflect.Zero(t).Interface().(interface{ JSONType() string }); ok {
		return w.JSONType(), "values"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string", "strings"
	case reflect.Bool:
		return "true or false", "true or false values"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer", "integers"
	case reflect.Float32, reflect.Float64:
		return "a number", "numbers"
	case reflect.Slice, reflect.Array:
		_, elems := jsonNames(t.Elem())
		return "an array of " + elems, "arrays"
	case reflect.Map:
		_, elems := jsonNames(t.Elem())
		return "an object of " + elems, "objects"
	}
	return "an object", "objects"
}

// clip cuts s to at most n bytes and "...".
func clip(s string, n int) string {
	if len(s) > n {
		// Cut on a character boundary so the text stays valid UTF-8.
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		return s[:n] + "..."
	}
	return s
}
