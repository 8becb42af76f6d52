package relay

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jsonspan"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/toolresult"
	"github.com/commandcore/commandcore/internal/transport"
	"github.com/commandcore/commandcore/internal/uuidtext"
)

// Observer receives the relay's content-free events, for metrics. Every
// string it is given comes from a closed set: AuditTools, the outcomes
// store.AuditOK and AuditFailed, transport.End kinds, EnrollRefusals.
type Observer interface {
	Call(tool, outcome string, d time.Duration)
	LinkEnd(kind transport.End)
	EnrollRefused(reason string)
}

// UnknownTool stands in the audit log and the metrics for a tool name
// outside the relay's table, and for a request refused before its tool
// was read.
const UnknownTool = "unknown"

// CodeCancelled is the audit code of a call whose client went away or
// cancelled it before it was answered.
const CodeCancelled = "cancelled"

// AuditTools are the tool names the audit log and the metrics ever hold.
func AuditTools() []string {
	return append(append(toolNames(), DevicesListTool), UnknownTool)
}

// auditTool reduces a client's tool name to AuditTools: a name a client
// made up is never stored.
func auditTool(name string) string {
	if name == DevicesListTool || slices.Contains(toolNames(), name) {
		return name
	}
	return UnknownTool
}

// principalOf names whose call a token makes.
func principalOf(tok *store.Token) string { return tok.Principal }

// callKey carries a call's *callRecord to the tool handler.
type callKey struct{}

// callRecord is what a tool handler learns about a call that the audit
// needs: the device, once the multi-device endpoint has resolved it.
type callRecord struct{ device string }

// noteDevice records the device a call is for.
func noteDevice(ctx context.Context, id string) {
	if r, ok := ctx.Value(callKey{}).(*callRecord); ok && id != "" {
		r.device = id
	}
}

// observeCalls audits every tools/call of a client session and counts it,
// whatever answers it: a tool handler, or the SDK refusing a tool the
// session does not serve.
func (s *Server) observeCalls(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		call, ok := req.(*mcp.CallToolRequest)
		c := clientOf(ctx)
		if !ok || c == nil {
			return next(ctx, method, req)
		}
		rec := &callRecord{}
		if c.device != nil {
			rec.device = c.device.ID
		}
		at, start := s.Now(), time.Now()
		res, err := next(context.WithValue(ctx, callKey{}, rec), method, req)
		name := ""
		if call.Params != nil {
			name = call.Params.Name
		}
		tool := auditTool(name)
		job := jobOf(tool, call.Params.Arguments, res)
		s.observe(at, time.Since(start), c.token, rec.device, job, tool, callCode(res, err))
		return res, err
	}
}

// refusedWithoutToken counts a request turned away for its client token:
// in the audit by source and minute (never as an entry of its own, so no
// number of them pushes a call out of the log or out of its queue), and in
// the metrics. It is not logged, for the same reason.
func (s *Server) refusedWithoutToken(at, start time.Time, r *http.Request) {
	s.audit.refuse(at, s.clientSource(r))
	if s.Observer != nil {
		s.Observer.Call(UnknownTool, store.AuditFailed, time.Since(start))
	}
}

// refused audits a request with a valid token that the relay turned away
// before MCP read it.
func (s *Server) refused(at time.Time, start time.Time, tok *store.Token, dev *store.Device, err error) {
	device := ""
	if dev != nil {
		device = dev.ID
	}
	s.observe(at, time.Since(start), tok, device, "", UnknownTool, string(errcode.From(err).Code))
}

// observe records one call in the audit log and the metrics; job is the
// job it was about (jobOf), code is "" for a call that succeeded.
func (s *Server) observe(at time.Time, d time.Duration, tok *store.Token, device, job, tool, code string) {
	e := store.AuditEntry{At: at, Principal: principalOf(tok), TokenID: tok.ID, Device: device, Job: job, Tool: tool,
		Outcome: store.AuditOK, DurationUS: d.Microseconds()}
	if code != "" {
		e.Outcome, e.Code = store.AuditFailed, store.AuditCode(code)
	}
	s.audit.add(e)
	if s.Log != nil {
		// The audit entry's words only: never an argument or a result.
		s.Log.Printf("call %s device %s: %s %s in %s", tool, dash(device), e.Outcome, dash(e.Code), d.Round(time.Microsecond))
	}
	if s.Observer != nil {
		s.Observer.Call(tool, e.Outcome, d)
	}
}

// jobOf is the job a call of tool was about, for its audit entry: the
// process_id its arguments name, else the one its result names (the job
// process.start or process.run made), when it is a job's ID (a canonical
// UUID); "" for any other call. result is a device's result as it
// encoded it, or the SDK's *mcp.CallToolResult. Only tools about jobs are
// read, and only the members named, never a value's content.
func jobOf(tool string, args json.RawMessage, result any) string {
	if !strings.HasPrefix(tool, "process.") {
		return ""
	}
	if id := processID(args); id != "" {
		return id
	}
	switch r := result.(type) {
	case []byte:
		if ms, err := jsonspan.Object(r); err == nil {
			return processID(jsonspan.Find(ms, "structuredContent"))
		}
	case *mcp.CallToolResult:
		if m, ok := r.StructuredContent.(map[string]any); ok {
			if id, _ := m["process_id"].(string); uuidtext.Canonical(id) {
				return id
			}
		}
	}
	return ""
}

// processID is the object obj's process_id when it is a job's ID.
func processID(obj []byte) string {
	ms, err := jsonspan.Object(obj)
	if err != nil {
		return ""
	}
	if id, ok := jsonspan.String(jsonspan.Find(ms, "process_id")); ok && uuidtext.Canonical(id) {
		return id
	}
	return ""
}

// dash is s, or "-" when it is empty, for a log column.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// callCode is the error code of a finished call, "" when it succeeded. A
// result with isError carries its code in structuredContent.error.code; a
// protocol error is mapped to the code that says why.
func callCode(res mcp.Result, err error) string {
	if err != nil {
		var werr *jsonrpc.Error
		switch {
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			return CodeCancelled
		case errors.As(err, &werr) && werr.Code == jsonrpc.CodeInvalidParams:
			// The SDK's answer for a tool the session does not serve.
			return string(errcode.NotFound)
		}
		return string(errcode.Internal)
	}
	r, ok := res.(*mcp.CallToolResult)
	if !ok || r == nil || !r.IsError {
		return ""
	}
	if e, ok := r.StructuredContent.(toolresult.ErrorResult); ok && e.Error != nil {
		return string(e.Error.Code)
	}
	// A device's failure, decoded as plain JSON. Failures are small; a
	// success is never re-encoded.
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if raw, err := json.Marshal(r.StructuredContent); err == nil {
		json.Unmarshal(raw, &body)
	}
	return store.AuditCode(body.Error.Code)
}

// ConnectedDevices is the number of devices with a live link.
func (s *Server) ConnectedDevices() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.links)
}

// AuditDropped is the number of calls the audit log could not record.
func (s *Server) AuditDropped() uint64 { return s.audit.dropped.Load() }

// CrossReplicaCalls are the calls this replica sent to the replica
// holding their device's link, and those it served for another.
func (s *Server) CrossReplicaCalls() (sent, served uint64) {
	return s.crossSent.Load(), s.crossServed.Load()
}

// dropCounter is Peers that count the messages they dropped (relay/cluster).
type dropCounter interface{ Dropped() map[string]uint64 }

// PeerMessagesDropped are the messages from the other replicas this one
// dropped instead of acting on them, by reason; nil when it runs alone.
func (s *Server) PeerMessagesDropped() map[string]uint64 {
	if d, ok := s.peers.(dropCounter); ok {
		return d.Dropped()
	}
	return nil
}

// ReplicaLinks is how many device links each live replica holds, by
// name, as the state records them.
func (s *Server) ReplicaLinks() map[string]int {
	rs, err := s.store.Replicas(s.Now())
	if err != nil {
		return nil
	}
	links := map[string]int{}
	for _, r := range rs {
		links[r.Name] += r.Links
	}
	return links
}

// linkEnded counts a device link's end by its kind.
func (s *Server) linkEnded(conn *transport.Conn) {
	if s.Observer != nil {
		s.Observer.LinkEnd(conn.End())
	}
}

// The reasons an enrollment is refused, by the HTTP status it got.
const (
	RefusedBadRequest  = "bad_request"
	RefusedCode        = "code_refused"
	RefusedTooLarge    = "too_large"
	RefusedRateLimited = "rate_limited"
	RefusedInternal    = "internal"
	RefusedOther       = "other"
)

// EnrollRefusals are every reason an enrollment refusal is counted under.
var EnrollRefusals = []string{RefusedBadRequest, RefusedCode, RefusedTooLarge, RefusedRateLimited, RefusedInternal, RefusedOther}

// refusalReason names a refused enrollment's reason by its HTTP status:
// content-free, and true to whatever the handler answered.
func refusalReason(status int) string {
	switch {
	case status == http.StatusBadRequest:
		return RefusedBadRequest
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return RefusedCode
	case status == http.StatusRequestEntityTooLarge:
		return RefusedTooLarge
	case status == http.StatusTooManyRequests:
		return RefusedRateLimited
	case status >= 500:
		return RefusedInternal
	}
	return RefusedOther
}

// countRefusals counts the enrollments h refuses (any answer of 400 or
// above).
func (s *Server) countRefusals(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r)
		if sw.status >= 400 && s.Observer != nil {
			s.Observer.EnrollRefused(refusalReason(sw.status))
		}
	}
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
