// Package mcpwire writes the agent's JSON-RPC messages with one pass fewer
// over a tool result than the go-sdk's own encoder makes. The SDK encodes a
// result once into compact JSON (jsonrpc.Response.Result), and its
// jsonrpc.EncodeMessage then copies those bytes through encoding/json's
// compaction again to embed them in the response: for a 64 KiB
// process.output page that second pass was a fifth of the agent's CPU for
// the call (BENCHMARKS.md, "Cheaper results"). Here the result is spliced
// in as it is, giving the same bytes.
package mcpwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Encode returns msg as one JSON-RPC message, byte for byte what
// jsonrpc.EncodeMessage returns for it. A successful response's result is
// copied, not compacted again: it must be compact, valid JSON, as the SDK
// encodes every result it sends (Connection.Write receives only those).
func Encode(msg jsonrpc.Message) ([]byte, error) {
	resp, ok := msg.(*jsonrpc.Response)
	if !ok || resp.Error != nil || len(resp.Result) == 0 || !resp.ID.IsValid() {
		return jsonrpc.EncodeMessage(msg)
	}
	const head, mid = `{"jsonrpc":"2.0","id":`, `,"result":`
	var id []byte
	switch v := resp.ID.Raw().(type) {
	case int64:
		id = strconv.AppendInt(nil, v, 10)
	case string:
		var err error
		if id, err = marshalNoEscape(v); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("encode response: id of type %T", v)
	}
	// One allocation, with room for the newline a stream transport adds.
	out := make([]byte, 0, len(head)+len(id)+len(mid)+len(resp.Result)+2)
	out = append(out, head...)
	out = append(out, id...)
	out = append(out, mid...)
	out = append(out, resp.Result...)
	return append(out, '}'), nil
}

// marshalNoEscape is json.Marshal without HTML escaping, as the SDK
// encodes IDs.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
