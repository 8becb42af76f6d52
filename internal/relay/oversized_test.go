package relay

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestScanCallFindsTheCallPastItsArguments: the id, method and tool are
// found wherever they stand, the arguments read past; anything that is
// not a tools/call with a plain id is not one.
func TestScanCallFindsTheCallPastItsArguments(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	for raw, want := range map[string]*scannedCall{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"files.write","arguments":{"content":"` + big + `"}}}`: {[]byte("7"), "files.write"},
		`{"method":"tools/call","params":{"arguments":{"a":[1,{"b":[]}]},"name":"process.run"},"jsonrpc":"2.0","id":"r-1"}`:    {[]byte(`"r-1"`), "process.run"},
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`:                                                                       nil,
		`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"files.write"}}`:                                              nil,
		`{"jsonrpc":"2.0","id":{"x":1},"method":"tools/call","params":{"name":"a"}}`:                                           nil,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["files.write"]}`:                                              nil,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call"}]`:                                                                     nil,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"content":"` + big[:100]:              nil,
	} {
		got, ok := scanCall(strings.NewReader(raw))
		if want == nil {
			if ok {
				t.Errorf("%.80s: found a call %+v", raw, got)
			}
			continue
		}
		if !ok || string(got.id) != string(want.id) || got.tool != want.tool {
			t.Errorf("%.80s: %v %+v, want %+v", raw, ok, got, want)
		}
	}
}

// FuzzScanCall: whatever an oversized request holds, the scan never
// panics, and a call it finds has an id a response may carry.
func FuzzScanCall(f *testing.F) {
	f.Add(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"files.write","arguments":{"content":"x"}}}`)
	f.Add(`{"id":"a","method":"tools/call","params":{"name":1}}`)
	f.Add(`{"params":{"name":"a"`)
	f.Fuzz(func(t *testing.T, raw string) {
		call, ok := scanCall(strings.NewReader(raw))
		if ok && (!plainID(call.id) || !json.Valid(call.id)) {
			t.Fatalf("found id %q", call.id)
		}
	})
}
