package relay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// errOversized answers a tool call whose request is larger than the relay
// takes: as the tool's failure, so the client's model reads why.
var errOversized = errcode.New(errcode.InvalidArgument,
	"the request is larger than the relay takes (%d MiB); files.write takes at most %d MiB of content a call: write larger files in parts (mode append)",
	limits.MaxRelayRequestBytes>>20, limits.FileWriteMax>>20)

// refuseOversized answers a request over limits.MaxRelayRequestBytes whose
// first part is head: a tools/call found in it (read on to at most
// limits.MaxRelayOversizeScan) gets a failed tool result, audited; any
// other request HTTP 413.
func (s *Server) refuseOversized(w http.ResponseWriter, r *http.Request, c *client, head []byte, at time.Time, start time.Time) {
	call, ok := scanCall(io.MultiReader(bytes.NewReader(head), io.LimitReader(r.Body, limits.MaxRelayOversizeScan-int64(len(head)))))
	if !ok {
		http.Error(w, fmt.Sprintf("request body exceeds %d bytes", limits.MaxRelayRequestBytes), http.StatusRequestEntityTooLarge)
		return
	}
	device := ""
	if c.device != nil {
		device = c.device.ID
	}
	s.observe(at, time.Since(start), c.token, device, "", auditTool(call.tool), string(errcode.InvalidArgument))
	out := &eventStream{w: w}
	out.answer(call.id, failureResult(errOversized))
	out.end()
}

// scannedCall is what scanCall finds of a tools/call.
type scannedCall struct {
	id   []byte
	tool string
}

// scanCall reads one JSON-RPC request as a stream, keeping only its id,
// method and params.name: the arguments, however large, are read past,
// never held whole. ok is false unless it is a tools/call with an id.
func scanCall(r io.Reader) (call scannedCall, ok bool) {
	dec := json.NewDecoder(r)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return call, false
	}
	method := ""
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return call, false
		}
		switch key {
		case "id":
			var id json.RawMessage
			if dec.Decode(&id) != nil || !plainID(id) {
				return call, false
			}
			call.id = id
		case "method":
			if dec.Decode(&method) != nil {
				return call, false
			}
		case "params":
			if call.tool, err = scanToolName(dec); err != nil {
				return call, false
			}
		default:
			if skipValue(dec) != nil {
				return call, false
			}
		}
	}
	return call, method == "tools/call" && call.id != nil
}

// scanToolName reads a tools/call's params object for its name.
func scanToolName(dec *json.Decoder) (string, error) {
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", fmt.Errorf("params are not an object")
	}
	name := ""
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", err
		}
		if key == "name" {
			if err := dec.Decode(&name); err != nil {
				return "", err
			}
			continue
		}
		if err := skipValue(dec); err != nil {
			return "", err
		}
	}
	_, err := dec.Token()
	return name, err
}

// skipValue reads past one JSON value, a token at a time.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}
