package tools

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/fileops"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/proclist"
	"github.com/commandcore/commandcore/internal/run"
	"github.com/commandcore/commandcore/internal/search"
	"github.com/commandcore/commandcore/internal/toolresult"
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

// definition is everything about one tool: its name, title, effect,
// description and handler. add registers it with its input and output
// types, which the handler fixes.
type definition struct {
	name, title string
	effect      hint
	desc        string
	add         func(registrar, definition)
}

// handlers are what the tools act on.
type handlers struct {
	svc  *jobs.Service
	host *Host
}

// tool defines a tool whose handler takes an In and returns an Out, which
// text summarises as the result's text content (nil: its compact JSON).
func tool[In, Out any](name, title string, effect hint, desc string, h func(*handlers, context.Context, Call, In) (Out, error), text func(Out) string) func(*handlers) definition {
	return func(hs *handlers) definition {
		return definition{name: name, title: title, effect: effect, desc: desc, add: func(r registrar, d definition) {
			add(r, d, func(ctx context.Context, c Call, in In) (Out, error) { return h(hs, ctx, c, in) }, text)
		}}
	}
}

// filesListTool is files.list's name, which until.path answers to too.
const filesListTool = "files.list"

// definitions are the tools this build serves, in listing order; the
// bounds their descriptions name come from internal/limits.
var definitions = []func(*handlers) definition{
	tool("system.metrics", "Host metrics", readOnly,
		"Host CPU, memory, swap, disks, pressure (PSI), uptime, boot ID and a health verdict; GPU data only when gpu is true (bounded probe).",
		(*handlers).systemMetrics, metricsText),
	tool("process.list", "List host processes", readOnly,
		fmt.Sprintf("Host processes, filtered literally by the arguments given (each narrows). The owner's processes show their arguments (args, at most %d KiB, args_truncated when cut; of many, the text cuts them shorter); other users' show name and argv0 only.", limits.ProcessArgsMaxBytes>>10),
		(*handlers).processList, processListText),
	tool("process.start", "Start a managed job", changes,
		"Launch a managed shell job that outlives this session. Returns its process_id; page output with process.output. Give an idempotency_key whenever you may retry the call: a retry then returns the same job.",
		(*handlers).processStart, startText),
	tool("process.status", "Job status", readOnly,
		"One managed job's full record: state, end reason, exit code, capture counters, identity.",
		(*handlers).processStatus, recordText),
	tool("process.output", "Read job output", readOnly,
		"Page a job's stdout and stderr by absolute offsets; wait_ms long-polls a live job. Following a chatty job, add min_bytes (e.g. 4096): a call per batch, not per write.",
		(*handlers).processOutput, outputText),
	tool("process.input", "Send input to a job", changes,
		fmt.Sprintf("Write data (at most %d KiB a call) to a running stdin or pty job's input, close it (eof), or have the person at the relay's web panel type a secret (secret_prompt). With wait_ms, returns the output the input produced (from the offsets the streams had before it) once it pauses; with until too, once that text (a prompt such as '>>> ') appears, so echo, answer and next prompt come back together. Input is never recorded.", limits.MaxInputBytes>>10),
		(*handlers).processInput, inputText),
	tool("process.resize", "Resize a job's terminal", changes,
		fmt.Sprintf("Resize a pty job's terminal (cols, rows 1-%d); the job gets SIGWINCH.", limits.TerminalDimensionMax),
		(*handlers).processResize, resizeText),
	tool("process.screen", "Read a job's screen", readOnly,
		"A pty job's screen as a terminal shows it (lines, cursor, alternate_screen, title); the last one once it has ended. Use it for full-screen programs (top, vim, less, installers) instead of their escape codes in process.output.",
		(*handlers).processScreen, screenText),
	tool("process.stop", "Stop a job", destructive,
		fmt.Sprintf("Request a stop (SIGTERM to the job's process group, SIGKILL after %s). Returns the current state.", seconds(limits.StopEscalation)),
		(*handlers).processStop, recordText),
	tool("process.wait", "Wait for jobs to end", readOnly, waitDescription, (*handlers).processWait, waitText),
	tool("process.jobs", "List managed jobs", readOnly, "List managed jobs, newest first.", (*handlers).processJobs, jobsText),
	tool("files.search", "Search files", readOnly,
		"Search files under a root by literal name and/or literal text; excluded directory names, size bound, result bound, deadline.",
		(*handlers).filesSearch, searchText),
	tool("files.read", "Read a file", readOnly,
		"Read a regular file by lines (start_line, line_count) or by bytes (offset, max_bytes): data as UTF-8 text or base64, the whole file's size and sha256, mtime, eof and where to continue. Directories, FIFOs and devices are refused, never opened.",
		(*handlers).filesRead, readText),
	tool("files.write", "Write a file", destructive,
		fmt.Sprintf("Write a file: create (default; already_exists if it exists), overwrite or append; expected_sha256 refuses with conflict unless the content matches. create and overwrite are atomic and keep an existing file's mode and owner. At most %d MiB.", limits.FileWriteMax>>20),
		(*handlers).filesWrite, writeText),
	tool("files.edit", "Edit a file", destructive,
		"Replace exact text in a file: every edit or none, atomically, each old_text found exactly expected_replacements times (default 1), else edit_mismatch naming the edit, the count and the line of the closest match. Returns a unified diff.",
		(*handlers).filesEdit, editText),
	tool(filesListTool, "List a directory", readOnly,
		"List a directory's entries (path, type, size, mode, mtime) to a depth, bounded, with excluded directory names; symlinks are listed, never followed.",
		(*handlers).filesList, filesListText),
	tool("process.run", "Run a short command", changes,
		fmt.Sprintf("Run a short foreground command and return its result (exit code, stdout/stderr: of more than max_bytes, the first and last half; output_capture). With a progress token, live output arrives as progress notifications of at most %d KiB (_meta names the stream and offset). Cancelled with the request.", limits.LiveChunkBytes>>10),
		(*handlers).processRun, runText),
	tool("process.forget", "Forget a finished job", destructive,
		"Delete a terminal job's metadata and output.",
		(*handlers).processForget, forgetText),
}

// annotate sets a tool's title and annotations from its definition.
func (d definition) annotate(t *mcp.Tool) {
	toolresult.Annotate(t, d.title, d.effect == readOnly, d.effect == destructive)
}

// table is every definition, bound to svc and host.
func table(svc *jobs.Service, host *Host) []definition {
	hs := &handlers{svc: svc, host: host}
	out := make([]definition, len(definitions))
	for i, d := range definitions {
		out[i] = d(hs)
	}
	return out
}

func (h *handlers) systemMetrics(ctx context.Context, _ Call, in metrics.MetricsRequest) (*metrics.Metrics, error) {
	return h.host.Metrics.Metrics(ctx, in)
}

func (h *handlers) processList(ctx context.Context, c Call, in proclist.Request) (*proclist.Result, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	return h.host.Processes.List(ctx, in, func(id string) bool {
		_, err := h.svc.Status(c.Who, id)
		return err == nil
	})
}

func (h *handlers) processStart(ctx context.Context, c Call, in jobs.StartRequest) (*jobs.StartResult, error) {
	return h.svc.Start(ctx, c.Who, in)
}

func (h *handlers) processStatus(_ context.Context, c Call, in IDRequest) (*jobmeta.Record, error) {
	return h.svc.Status(c.Who, in.ProcessID)
}

func (h *handlers) processOutput(ctx context.Context, c Call, in jobs.OutputRequest) (*jobs.Output, error) {
	return h.svc.Output(ctx, c.Who, in)
}

func (h *handlers) processInput(ctx context.Context, c Call, in jobs.InputRequest) (*jobs.InputResult, error) {
	return h.svc.Input(ctx, c.Who, in)
}

func (h *handlers) processResize(_ context.Context, c Call, in jobs.ResizeRequest) (*jobs.ResizeResult, error) {
	return h.svc.Resize(c.Who, in)
}

func (h *handlers) processScreen(_ context.Context, c Call, in jobs.ScreenRequest) (*jobs.ScreenResult, error) {
	return h.svc.Screen(c.Who, in.ProcessID)
}

func (h *handlers) processStop(_ context.Context, c Call, in IDRequest) (*jobmeta.Record, error) {
	return h.svc.Stop(c.Who, in.ProcessID)
}

func (h *handlers) processWait(ctx context.Context, c Call, in jobs.WaitRequest) (*jobs.WaitResult, error) {
	return wait(ctx, h.svc, h.host, c, in)
}

func (h *handlers) processJobs(_ context.Context, c Call, _ NoArgs) (*JobList, error) {
	sums, err := h.svc.Summaries(c.Who)
	if err != nil {
		return nil, err
	}
	return &JobList{Jobs: append(make([]jobmeta.Summary, 0, len(sums)), sums...)}, nil
}

func (h *handlers) filesSearch(ctx context.Context, _ Call, in search.Request) (*search.Result, error) {
	return search.Search(ctx, in, h.host.Own)
}

func (h *handlers) filesRead(ctx context.Context, _ Call, in fileops.ReadRequest) (*fileops.ReadResult, error) {
	return fileops.Read(ctx, h.host.Own, in)
}

func (h *handlers) filesWrite(_ context.Context, _ Call, in fileops.WriteRequest) (*fileops.WriteResult, error) {
	return fileops.Write(h.host.Own, in)
}

func (h *handlers) filesEdit(ctx context.Context, _ Call, in fileops.EditRequest) (*fileops.EditResult, error) {
	return fileops.EditFile(ctx, h.host.Own, in)
}

func (h *handlers) filesList(ctx context.Context, _ Call, in fileops.ListRequest) (*fileops.ListResult, error) {
	return fileops.List(ctx, h.host.Own, in)
}

func (h *handlers) processRun(ctx context.Context, c Call, in run.Request) (*run.Result, error) {
	shell, env := h.svc.CommandBase()
	hide, cut, err := h.svc.RunConfinement()
	if err != nil {
		return nil, err
	}
	opts := run.Options{Shell: shell, BaseEnv: env, Procs: h.svc.Procs(), Hide: hide, CutOff: cut}
	if tok := c.Req.Params.GetProgressToken(); tok != nil && c.Req.Session != nil {
		opts.Progress = progressSender(c.Req.Session, tok)
	}
	return run.Run(ctx, in, opts)
}

func (h *handlers) processForget(_ context.Context, c Call, in IDRequest) (*Forgotten, error) {
	if _, err := h.svc.Forget(c.Who, in.ProcessID); err != nil {
		return nil, err
	}
	return &Forgotten{ProcessID: in.ProcessID, Forgotten: true}, nil
}

// seconds writes d as a bound in a description: "3 s".
func seconds(d time.Duration) string { return fmt.Sprintf("%d s", int(d/time.Second)) }
