package tools

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/mcpwire"
	"github.com/commandcore/commandcore/internal/textenc"
	"github.com/commandcore/commandcore/internal/toolresult"
)

// TestOutputResultOnTheWire pins a process.output result as the agent
// writes it (the SDK's result encoding, then mcpwire's response): the text
// content is the state and each stream's range with its text (README:
// "a short summary with the output, not the JSON again"), a base64 page
// only named with its byte count, and the structured content every field
// of the page. Both carry the page's text HTML-escaped: the SDK encodes a
// result's content and structured content with json.Marshal.
func TestOutputResultOnTheWire(t *testing.T) {
	n := int64(12)
	out := &jobs.Output{
		ProcessID: "p1",
		Stdout:    jobs.StreamPage{Offset: 4, Data: "<b>&\"\n", Encoding: textenc.UTF8, NextOffset: 10},
		Stderr:    jobs.StreamPage{Offset: 0, Data: "/w==", Encoding: textenc.Base64, NextOffset: 1, EOF: true},
		Capture:   jobmeta.Capture{Stdout: jobmeta.StreamCapture{ObservedBytes: &n}},
		State:     jobmeta.Running,
	}
	// As the SDK's server encodes a result (no HTML escaping at its top).
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(toolresult.Summarized(out, outputText(out))); err != nil {
		t.Fatal(err)
	}
	id, _ := jsonrpc.MakeID(float64(3))
	frame, err := mcpwire.Encode(&jsonrpc.Response{ID: id, Result: bytes.TrimSuffix(b.Bytes(), []byte("\n"))})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"running\nstdout [4, 10) more:\n\u003cb\u003e\u0026\"\nstderr [0, 1): 1 bytes as base64 in the structured result\n"}],` +
		`"structuredContent":{"process_id":"p1",` +
		`"stdout":{"offset":4,"data":"\u003cb\u003e\u0026\"\n","encoding":"utf-8","next_offset":10,"eof":false},` +
		`"stderr":{"offset":0,"data":"/w==","encoding":"base64","next_offset":1,"eof":true},` +
		`"capture":{"stdout":{"observed_bytes":12,"retained_bytes":null,"dropped_bytes":null,"truncated":null,"complete":false,"last_output_at":null},` +
		`"stderr":{"observed_bytes":null,"retained_bytes":null,"dropped_bytes":null,"truncated":null,"complete":false,"last_output_at":null}},` +
		`"state":"running","terminal":false}}}`
	if string(frame) != want {
		t.Errorf("process.output result on the wire:\n%s\nwant\n%s", frame, want)
	}
}
