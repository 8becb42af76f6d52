package mcpwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sdkResult encodes a tool result as the SDK's server does before it
// hands the response to a connection (internal/jsonrpc2.marshalToRaw: an
// encoder without HTML escaping, its newline trimmed).
func sdkResult(t testing.TB, res *mcp.CallToolResult) json.RawMessage {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func id(t testing.TB, v any) jsonrpc.ID {
	t.Helper()
	i, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// TestEncodeIsTheSDKsEncoding: every message Encode writes is byte for
// byte what jsonrpc.EncodeMessage writes, so a client (and the relay,
// which forwards results as bytes) sees no difference.
func TestEncodeIsTheSDKsEncoding(t *testing.T) {
	page := strings.Repeat("x", 65536)
	tricky := "<b>&amp;</b> \u2028 \u2029 \"quoted\" \\ \x01 ünïcode \xff"
	results := []*mcp.CallToolResult{
		{Content: []mcp.Content{&mcp.TextContent{Text: "running\nstdout [30000, 95536) more:\n" + page + "\n"}},
			StructuredContent: map[string]any{"stdout": map[string]any{"data": page, "offset": 30000}}},
		{Content: []mcp.Content{&mcp.TextContent{Text: tricky}}, StructuredContent: map[string]any{"data": tricky}},
		{Content: []mcp.Content{}, IsError: true, StructuredContent: map[string]any{"error": map[string]any{"code": "not_found"}}},
	}
	var msgs []jsonrpc.Message
	for _, i := range []any{float64(0), float64(7), float64(-3), float64(1 << 53), "a", "<&>", "ü\u2028"} {
		for _, r := range results {
			msgs = append(msgs, &jsonrpc.Response{ID: id(t, i), Result: sdkResult(t, r)})
		}
		msgs = append(msgs,
			&jsonrpc.Response{ID: id(t, i), Result: json.RawMessage(`null`)},
			&jsonrpc.Response{ID: id(t, i), Error: &jsonrpc.Error{Code: -32010, Message: "too large"}},
			&jsonrpc.Response{ID: id(t, i), Error: errors.New("plain")},
			&jsonrpc.Request{ID: id(t, i), Method: "ping"},
		)
	}
	msgs = append(msgs, &jsonrpc.Request{Method: "notifications/progress", Params: json.RawMessage(`{"progress":1,"message":"<x>"}`)})
	for _, m := range msgs {
		want, werr := jsonrpc.EncodeMessage(m)
		got, gerr := Encode(m)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Errorf("Encode(%#v) =\n%.300s, %v\nwant\n%.300s, %v", m, got, gerr, want, werr)
		}
	}
}

// FuzzEncode: for any text and structured data a result carries and any
// ID, Encode writes what the SDK writes.
func FuzzEncode(f *testing.F) {
	f.Add("running\nstdout [0, 3):\nabc\n", "abc", int64(1), "")
	f.Add("<&>\u2028", "\xff\x00", int64(-1), "id<&>")
	f.Fuzz(func(t *testing.T, text, data string, num int64, sid string) {
		res := sdkResult(t, &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: map[string]any{"data": data}})
		ids := []jsonrpc.ID{id(t, float64(num>>11))} // what a float64 holds exactly
		if sid != "" {
			ids = append(ids, id(t, sid))
		}
		for _, i := range ids {
			m := &jsonrpc.Response{ID: i, Result: res}
			want, err := jsonrpc.EncodeMessage(m)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := Encode(m); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Encode = %q, %v; want %q", got, err, want)
			}
		}
	})
}
