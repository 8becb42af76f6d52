package relay

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jsonspan"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/toolresult"
	"github.com/commandcore/commandcore/internal/transport"
)

// The relay answers the common tools/call itself, as bytes: it reads the
// request's envelope without decoding the arguments, forwards them to the
// device (wire.go) and writes the device's progress and result to the
// client's event stream as the device encoded them, with only the client's
// request id and progress token put in place. Every other request, and a
// tools/call in any shape this file does not know to be the plain one
// (batches, unknown members, escaped or repeated keys, headers it does not
// check, a tool the session does not serve), goes to the SDK's handler,
// which answers it as before.

// statelessProtocol is the first protocol revision whose requests carry
// their version in _meta and whose results name their type (SEP-2575).
const statelessProtocol = "2026-07-28"

// directCall is a client's tools/call that the relay forwards itself.
type directCall struct {
	id       []byte // the JSON-RPC id, as the client wrote it
	tool     string
	args     json.RawMessage // nil when the client sent none
	progress []byte          // the client's progress token as written, or nil
	// stateless: the request speaks statelessProtocol or later.
	stateless bool
}

// readDirect returns the call when r is a tools/call the relay may answer
// itself, checked as the SDK's handler would check it.
func readDirect(r *http.Request, body []byte, c *client) (*directCall, bool) {
	if r.Method != http.MethodPost || len(r.Header.Values("Last-Event-ID")) > 0 ||
		mediaType(r.Header.Get("Content-Type")) != "application/json" || !acceptsJSONAndEvents(r.Header.Values("Accept")) {
		return nil, false
	}
	// The SDK refuses a non-loopback Host on a loopback listener (DNS
	// rebinding); such requests get its answer.
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && loopbackAddr(local.String()) && !loopbackAddr(r.Host) {
		return nil, false
	}
	version := r.Header.Get("Mcp-Protocol-Version")
	if version != "" && !slices.Contains(mcp.SupportedProtocolVersions(), version) {
		return nil, false
	}
	for k := range r.Header {
		if strings.HasPrefix(k, "Mcp-Param-") {
			return nil, false
		}
	}
	ms, err := jsonspan.Object(body)
	if err != nil || len(ms) != 4 {
		return nil, false
	}
	if v, _ := jsonspan.String(jsonspan.Find(ms, "jsonrpc")); v != "2.0" {
		return nil, false
	}
	if m, _ := jsonspan.String(jsonspan.Find(ms, "method")); m != "tools/call" {
		return nil, false
	}
	dc := &directCall{id: jsonspan.Find(ms, "id"), stateless: version >= statelessProtocol}
	if !plainID(dc.id) {
		return nil, false
	}
	params, err := jsonspan.Object(jsonspan.Find(ms, "params"))
	if err != nil {
		return nil, false
	}
	var metaVersion []byte
	for _, p := range params {
		switch p.Key {
		case "name":
			var ok bool
			if dc.tool, ok = jsonspan.String(p.Value); !ok {
				return nil, false
			}
		case "arguments":
			dc.args = p.Value
		case "_meta":
			meta, err := jsonspan.Object(p.Value)
			if err != nil {
				return nil, false
			}
			if dc.progress = jsonspan.Find(meta, "progressToken"); dc.progress != nil && !plainID(dc.progress) {
				return nil, false
			}
			metaVersion = jsonspan.Find(meta, mcp.MetaKeyProtocolVersion)
		default:
			return nil, false
		}
	}
	if dc.stateless {
		if v, _ := jsonspan.String(metaVersion); v != version ||
			r.Header.Get("Mcp-Method") != "tools/call" || r.Header.Get("Mcp-Name") != dc.tool {
			return nil, false
		}
	} else if metaVersion != nil {
		return nil, false
	}
	if !slices.Contains(toolNames(), dc.tool) || !c.visible(dc.tool) || asksSecret(dc.tool, dc.args) || waitsOnPath(dc.tool, dc.args) {
		return nil, false
	}
	return dc, true
}

// plainID reports whether v is an id or progress token as the SDK reads
// one: a string without escapes, or an integer.
func plainID(v []byte) bool {
	if _, ok := jsonspan.String(v); ok {
		return true
	}
	digits := strings.TrimPrefix(string(v), "-")
	return digits != "" && strings.Trim(digits, "0123456789") == "" && (digits == "0" || digits[0] != '0')
}

// mediaType is a Content-Type's media type, without parameters.
func mediaType(v string) string {
	base, _, _ := strings.Cut(v, ";")
	return strings.ToLower(strings.TrimSpace(base))
}

// acceptsJSONAndEvents reports whether Accept names both a JSON answer and
// an event stream, as the SDK requires of a POST.
func acceptsJSONAndEvents(values []string) (ok bool) {
	var js, events bool
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			switch mediaType(t) {
			case "application/json", "application/*":
				js = true
			case "text/event-stream", "text/*":
				events = true
			case "*/*":
				js, events = true, true
			}
		}
	}
	return js && events
}

// loopbackAddr reports whether host[:port] names a loopback address.
func loopbackAddr(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.Trim(hostport, "[]")
	}
	return transport.IsLoopbackHost(host)
}

// serveDirect answers a direct call on the request's event stream and
// audits it.
func (s *Server) serveDirect(w http.ResponseWriter, r *http.Request, c *client, dc *directCall) {
	at, start := s.Now(), time.Now()
	out := &eventStream{w: w}
	// The link's reader may still be handing over a progress notification
	// when the call ends; none may touch the response after the handler.
	defer out.end()
	var progress func([]byte)
	if dc.progress != nil {
		progress = func(params []byte) { out.progress(dc.progress, params) }
	}
	result, device, err := s.forward(r.Context(), c, c.token, dc.tool, dc.args, progress)
	var code string
	switch {
	case isCancel(err):
		// The client is gone; nobody reads an answer.
		s.observe(at, time.Since(start), c.token, device, jobOf(dc.tool, dc.args, nil), dc.tool, CodeCancelled)
		return
	case err != nil:
		result, code = failureResult(err), string(errcode.From(err).Code)
	default:
		if out.lost.Load() {
			result = markIncomplete(result)
		}
		code = resultCode(result)
	}
	if dc.stateless {
		result = typed(result)
	}
	// Audited before the answer, as the SDK's path is: a client that has
	// its answer finds its call in the audit log.
	s.observe(at, time.Since(start), c.token, device, jobOf(dc.tool, dc.args, result), dc.tool, code)
	out.answer(dc.id, result)
}

// failureResult is a failed call's result, encoded.
func failureResult(err error) []byte {
	b, mErr := json.Marshal(toolresult.Failure(err))
	if mErr != nil {
		return []byte(`{"isError":true,"content":[{"type":"text","text":"internal"}]}`)
	}
	return b
}

// typed gives a result the resultType the stateless revisions require,
// unless the device's already names one.
func typed(result []byte) []byte {
	ms, err := jsonspan.Object(result)
	if err != nil || jsonspan.Find(ms, "resultType") != nil {
		return result
	}
	if len(ms) == 0 {
		return []byte(`{"resultType":"complete"}`)
	}
	// A member's span starts at its value; the object's first byte is '{'.
	out := make([]byte, 0, len(result)+24)
	out = append(out, `{"resultType":"complete",`...)
	return append(out, bytes.TrimLeft(result, " \t\r\n")[1:]...)
}

// resultCode is the audit code of a device's result: "" for a success,
// structuredContent.error.code for a failure. Only a failure, which is
// small, is decoded.
func resultCode(result []byte) string {
	ms, err := jsonspan.Object(result)
	if err != nil {
		var r struct {
			IsError bool `json:"isError"`
		}
		if json.Unmarshal(result, &r) != nil || !r.IsError {
			return ""
		}
		return string(errcode.Internal)
	}
	if string(jsonspan.Find(ms, "isError")) != "true" {
		return ""
	}
	var sc struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(jsonspan.Find(ms, "structuredContent"), &sc)
	return store.AuditCode(sc.Error.Code)
}

// eventStream is a direct call's answer: text/event-stream, as the SDK's
// stateless handler writes it. The link's reader writes progress and the
// handler the result, one at a time; after the result nothing more.
type eventStream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	started bool
	done    bool
	buf     []byte
	// lost is set once a write failed: the client missed output.
	lost atomic.Bool
}

// progress writes one progress notification with the client's token.
func (e *eventStream) progress(token, params []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done || e.lost.Load() {
		return
	}
	b, ok := appendWithToken(append(e.buf[:0], `{"jsonrpc":"2.0","method":"notifications/progress","params":`...), params, token)
	if !ok {
		return
	}
	e.buf = append(b, '}')
	if e.write(e.buf) != nil {
		e.lost.Store(true)
	}
}

// end ends the stream: it waits for a progress write under way, and no
// other follows.
func (e *eventStream) end() {
	e.mu.Lock()
	e.done = true
	e.mu.Unlock()
}

// answer writes the call's response.
func (e *eventStream) answer(id, result []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.done = true
	head := append(append([]byte(`{"jsonrpc":"2.0","id":`), id...), `,"result":`...)
	e.write(head, result, []byte("}"))
}

// write sends one event made of parts and flushes it. Each write has its
// own deadline (writeBounded), so a stalled client fails it.
func (e *eventStream) write(parts ...[]byte) error {
	if !e.started {
		e.started = true
		h := e.w.Header()
		h.Set("Cache-Control", "no-cache, no-transform")
		h.Set("Content-Type", "text/event-stream")
		h.Set("Connection", "keep-alive")
		e.w.WriteHeader(http.StatusOK)
	}
	if _, err := e.w.Write([]byte("event: message\ndata: ")); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := e.w.Write(p); err != nil {
			return err
		}
	}
	if _, err := e.w.Write([]byte("\n\n")); err != nil {
		return err
	}
	return http.NewResponseController(e.w).Flush()
}
