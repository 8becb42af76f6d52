// Package tools serves the job core as MCP tools (SPEC §3). Inputs are
// decoded strictly here, so an unknown or mistyped argument becomes an
// invalid_argument tool error instead of being ignored.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/proclist"
	"github.com/commandcore/commandcore/internal/run"
	"github.com/commandcore/commandcore/internal/search"
	"github.com/commandcore/commandcore/internal/textenc"
)

// IDRequest names one job.
type IDRequest struct {
	ProcessID string `json:"process_id" jsonschema:"the job's process_id"`
}

// NoArgs is the input of tools without arguments.
type NoArgs struct{}

// JobList is process.jobs's result.
type JobList struct {
	Jobs []jobmeta.Summary `json:"jobs"`
}

// Forgotten is process.forget's result.
type Forgotten struct {
	ProcessID string `json:"process_id"`
	Forgotten bool   `json:"forgotten"`
}

// ErrorResult is the structured content of a failed call.
type ErrorResult struct {
	Error *errcode.Error `json:"error"`
}

// Host holds the host-insight engines the tools use.
type Host struct {
	Metrics   *metrics.Source
	Processes *proclist.Lister
}

// NewHost returns the engines over the proc file system at procRoot.
func NewHost(procRoot string) (*Host, error) {
	m, err := metrics.NewSource(procRoot)
	if err != nil {
		return nil, err
	}
	p, err := proclist.New(procRoot)
	if err != nil {
		return nil, err
	}
	return &Host{Metrics: m, Processes: p}, nil
}

// Register adds the tools of SPEC §3 that this build serves to srv.
func Register(srv *mcp.Server, svc *jobs.Service, host *Host) {
	add(srv, svc.Journal, "system.metrics", "Host CPU, memory, swap, disks, pressure (PSI), uptime, boot ID and a health verdict; GPU data only when gpu is true (bounded probe).",
		func(ctx context.Context, _ *mcp.CallToolRequest, in metrics.MetricsRequest) (any, error) {
			return host.Metrics.Metrics(ctx, in)
		})
	add(srv, svc.Journal, "process.list", "Host processes, filtered literally by name, user, pid, ppid, state, cgroup substring or managed (CommandCore jobs only); each filter narrows.",
		func(ctx context.Context, _ *mcp.CallToolRequest, in proclist.Request) (any, error) {
			if err := in.Validate(); err != nil {
				return nil, err
			}
			return host.Processes.List(ctx, in)
		})
	add(srv, svc.Journal, "process.start", "Launch a managed shell job that outlives this session. Returns its process_id; page output with process.output.",
		func(ctx context.Context, _ *mcp.CallToolRequest, in jobs.StartRequest) (any, error) {
			return svc.Start(ctx, in)
		})
	add(srv, svc.Journal, "process.status", "One managed job's full record: state, end reason, exit code, capture counters, identity.",
		func(_ context.Context, _ *mcp.CallToolRequest, in IDRequest) (any, error) {
			return svc.Status(in.ProcessID)
		})
	add(srv, svc.Journal, "process.output", "Page a managed job's stdout and stderr by absolute offsets; wait_ms long-polls a live job.",
		func(ctx context.Context, _ *mcp.CallToolRequest, in jobs.OutputRequest) (any, error) {
			return svc.Output(ctx, in)
		})
	add(srv, svc.Journal, "process.stop", "Request a stop (SIGTERM to the job's process group, SIGKILL after 3 s). Returns the current state.",
		func(_ context.Context, _ *mcp.CallToolRequest, in IDRequest) (any, error) {
			return svc.Stop(in.ProcessID)
		})
	add(srv, svc.Journal, "process.jobs", "List managed jobs, newest first.",
		func(_ context.Context, _ *mcp.CallToolRequest, _ NoArgs) (any, error) {
			recs, err := svc.List()
			if err != nil {
				return nil, err
			}
			out := JobList{Jobs: make([]jobmeta.Summary, 0, len(recs))}
			for _, r := range recs {
				out.Jobs = append(out.Jobs, r.Summary())
			}
			return out, nil
		})
	add(srv, svc.Journal, "files.search", "Search files under a root by literal name and/or literal text; excluded directory names, size bound, result bound, deadline.",
		func(ctx context.Context, _ *mcp.CallToolRequest, in search.Request) (any, error) {
			return search.Search(ctx, in)
		})
	add(srv, svc.Journal, "process.run", "Run a short foreground command and return its result (exit code, bounded stdout/stderr, output_capture). With a progress token, live output arrives as progress notifications of at most 8 KiB: message is the text, or base64: and the bytes when not UTF-8; _meta names the stream, offset and encoding. Cancelled with the request.",
		func(ctx context.Context, req *mcp.CallToolRequest, in run.Request) (any, error) {
			opts := run.Options{Shell: svc.Shell, BaseEnv: svc.BaseEnv, Procs: svc.Procs}
			if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
				opts.Progress = progressSender(req.Session, tok)
			}
			return run.Run(ctx, in, opts)
		})
	add(srv, svc.Journal, "process.forget", "Delete a terminal job's metadata and output.",
		func(_ context.Context, _ *mcp.CallToolRequest, in IDRequest) (any, error) {
			if _, err := svc.Forget(in.ProcessID); err != nil {
				return nil, err
			}
			return Forgotten{ProcessID: in.ProcessID, Forgotten: true}, nil
		})
}

// add registers a tool whose input is decoded strictly into In.
func add[In any](srv *mcp.Server, j *activity.Journal, name, desc string, h func(context.Context, *mcp.CallToolRequest, In) (any, error)) {
	schema, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("schema for %s: %v", name, err))
	}
	srv.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: schema},
		func(ctx context.Context, req *mcp.CallToolRequest) (res *mcp.CallToolResult, _ error) {
			began := time.Now()
			defer func() {
				// One failing call must not take the server and every other
				// client's session down with it.
				if p := recover(); p != nil {
					res = Failure(fmt.Errorf("tool %s panicked: %v", name, p))
				}
			}()
			var in In
			var out any
			err := Decode(req.Params.Arguments, &in)
			if err == nil {
				out, err = h(ctx, req, in)
			}
			j.Record(activity.ToolCallEvent(activity.Tool(name), jobIDOf(in, out), time.Since(began), err))
			if err != nil {
				return Failure(err), nil
			}
			return Success(out), nil
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
	}
	if r, ok := out.(*jobs.StartResult); ok && r != nil {
		return r.ProcessID
	}
	return ""
}

// Decode decodes tool arguments strictly: unknown fields, wrong types and
// trailing data are invalid_argument errors that name the field at most.
func Decode(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	if err := checkKeys(raw, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errcode.New(errcode.InvalidArgument, "%s", describe(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errcode.New(errcode.InvalidArgument, "arguments must be one JSON object")
	}
	return nil
}

// checkKeys rejects what encoding/json would let through: argument names
// that differ from the schema's only in case, and repeated names. Only the
// top-level object is checked; nested maps (env) keep their own keys.
func checkKeys(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		// Not an object: the decoder proper reports it.
		return nil
	}
	allowed := fieldNames(reflect.TypeOf(v).Elem())
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		if !allowed[key] {
			return errcode.New(errcode.InvalidArgument, "unknown argument %q", clip(key))
		}
		if seen[key] {
			return errcode.New(errcode.InvalidArgument, "argument %q is given twice", clip(key))
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// fieldNames returns the JSON names of a struct type's fields.
func fieldNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	if t.Kind() != reflect.Struct {
		return names
	}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" {
			name = t.Field(i).Name
		}
		if name != "-" {
			names[name] = true
		}
	}
	return names
}

// maxFieldEcho bounds how much of a client-supplied field name is echoed.
const maxFieldEcho = 64

func describe(err error) string {
	var typ *json.UnmarshalTypeError
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &typ):
		if typ.Field == "" {
			return "arguments must be a JSON object"
		}
		return fmt.Sprintf("argument %q has the wrong type (want %s)", clip(typ.Field), typ.Type)
	case errors.As(err, &syn):
		return "arguments are not valid JSON"
	}
	const prefix = "json: unknown field "
	if msg := err.Error(); len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		return "unknown argument " + clip(msg[len(prefix):])
	}
	return "arguments could not be decoded"
}

func clip(s string) string {
	if len(s) > maxFieldEcho {
		// Cut on a character boundary so the message stays valid UTF-8.
		n := maxFieldEcho
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		return s[:n] + "..."
	}
	return s
}

// Success wraps a structured result.
func Success(out any) *mcp.CallToolResult {
	text, err := json.Marshal(out)
	if err != nil {
		return Failure(fmt.Errorf("encode result: %w", err))
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(text)}},
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
