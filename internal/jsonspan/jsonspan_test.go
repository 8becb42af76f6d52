package jsonspan

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestObjectSplitsMembers(t *testing.T) {
	ms, err := Object([]byte(` {"jsonrpc":"2.0", "id" : 7,"params":{"a":[1,{"b":null}],"s":"x\"}"},"e":{}} `))
	if err != nil {
		t.Fatal(err)
	}
	want := []Member{{"jsonrpc", []byte(`"2.0"`)}, {"id", []byte(`7`)}, {"params", []byte(`{"a":[1,{"b":null}],"s":"x\"}"}`)}, {"e", []byte(`{}`)}}
	if len(ms) != len(want) {
		t.Fatalf("members %q", ms)
	}
	for i := range want {
		if ms[i].Key != want[i].Key || !bytes.Equal(ms[i].Value, want[i].Value) {
			t.Fatalf("member %d is %s=%s, want %s=%s", i, ms[i].Key, ms[i].Value, want[i].Key, want[i].Value)
		}
	}
	if string(Find(ms, "id")) != "7" || Find(ms, "nope") != nil {
		t.Fatal("Find")
	}
	if ms, err := Object([]byte(`{}`)); err != nil || len(ms) != 0 {
		t.Fatalf("empty object: %v %v", ms, err)
	}
}

// TestObjectRefusesWhatADecoderCouldReadOtherwise: a repeated key, or one
// written with an escape, is ambiguous: encoding/json would take the last,
// or match the unescaped name.
func TestObjectRefusesWhatADecoderCouldReadOtherwise(t *testing.T) {
	for _, in := range []string{
		`{"name":"a","name":"b"}`,
		`{"na\u006de":"b"}`,
		`{"a\"":1}`,
		"{\"\xaa\":1,\"\xab\":2}",
	} {
		if _, err := Object([]byte(in)); !errors.Is(err, ErrAmbiguous) {
			t.Errorf("%s: %v, want ErrAmbiguous", in, err)
		}
	}
	// Nested objects are the next decoder's business.
	if _, err := Object([]byte(`{"a":{"k":1,"k":2}}`)); err != nil {
		t.Errorf("nested repeat: %v", err)
	}
}

func TestObjectRefusesInvalidJSON(t *testing.T) {
	for _, in := range []string{
		``, `[]`, `"x"`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1}x`, `{"a":1}{}`, `{a:1}`,
		`{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":1e}`, `{"a":tru}`, `{"a":"\x"}`, `{"a":"\u12g4"}`,
		"{\"a\":\"\x01\"}", `{"a":[1,]}`, `{"a":[1 2]}`, `{"a":"unterminated}`, `{"a":{"b":1,}}`,
		`{"a":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`,
	} {
		if _, err := Object([]byte(in)); !errors.Is(err, ErrSyntax) {
			t.Errorf("%q: %v, want ErrSyntax", in, err)
		}
	}
}

func TestDepthIsEncodingJSONs(t *testing.T) {
	for _, n := range []int{MaxDepth - 1, MaxDepth, MaxDepth + 1} {
		in := []byte(strings.Repeat("[", n) + strings.Repeat("]", n))
		if Valid(in) != json.Valid(in) || Valid(in) != (n <= 10000) {
			t.Errorf("%d nested arrays: Valid %v, encoding/json %v", n, Valid(in), json.Valid(in))
		}
	}
}

func TestString(t *testing.T) {
	for in, want := range map[string]string{`"tools/call"`: "tools/call", `""`: ""} {
		if got, ok := String([]byte(in)); !ok || got != want {
			t.Errorf("%s: %q %v", in, got, ok)
		}
	}
	for _, in := range []string{`"a\nb"`, `7`, `null`, `"`, ``} {
		if _, ok := String([]byte(in)); ok {
			t.Errorf("%s is not a plain string", in)
		}
	}
}

// FuzzObject: Valid agrees with encoding/json; Object accepts what
// encoding/json reads as an object with distinct plain keys, and its
// members are that object's.
func FuzzObject(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"process.run","arguments":{"command":"ls"}}}`,
		`{"a":[1,-2.5e+3,true,false,null,"\u00e9\n"],"b":{}}`, `{"a":1,"a":2}`, `[1]`, `{"a":"\ud800"}`, "{\"k\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if Valid(data) != json.Valid(data) {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", data, Valid(data), json.Valid(data))
		}
		ms, err := Object(data)
		var m map[string]json.RawMessage
		decodes := json.Unmarshal(data, &m) == nil && m != nil
		if err != nil {
			if decodes && errors.Is(err, ErrSyntax) {
				t.Fatalf("Object(%q): %v, but encoding/json reads it", data, err)
			}
			return
		}
		if !decodes || len(m) != len(ms) {
			t.Fatalf("Object(%q) = %d members; encoding/json: %v, %d", data, len(ms), decodes, len(m))
		}
		for _, mem := range ms {
			if !Valid(mem.Value) || !bytes.Equal(bytes.TrimSpace(mem.Value), mem.Value) {
				t.Fatalf("member %q of %q is %q", mem.Key, data, mem.Value)
			}
			var a, b any
			if json.Unmarshal(mem.Value, &a) != nil || json.Unmarshal(m[mem.Key], &b) != nil {
				t.Fatalf("member %q of %q does not decode", mem.Key, data)
			}
		}
	})
}

// TestValidAgreesWithEncodingJSON: the edges of every token, where a
// forwarder that disagreed with the next decoder would pass on what it
// refuses or refuse what it reads.
func TestValidAgreesWithEncodingJSON(t *testing.T) {
	for in, want := range map[string]bool{
		`0`: true, `-0`: true, `10`: true, `9`: true, `19`: true, `1.09`: true, `-1.90`: true,
		`1e5`: true, `1E5`: true, `1e+5`: true, `1e-5`: true, `1e09`: true, `1e`: false, `1e+`: false,
		`"\u09af\u0AF0"`: true, `"\u00G0"`: false, `"\u00:0"`: false, `"\u00g0"`: false, `"\u00@0"`: false,
		`"\u12`: false, `"\u12"`: false, `"\u"`: false,
		`" a b "`: true, "\"\x1f\"": false,
		`[1,"a",{"b":[true,false,null]}]`: true, `[1,x]`: false, `[.5]`: false, `[+1]`: false,
	} {
		// No spare capacity: a read past the end panics instead of
		// reading whatever follows.
		b := []byte(in)
		b = b[:len(b):len(b)]
		if got := Valid(b); got != want || json.Valid(b) != want {
			t.Errorf("Valid(%s) = %v, want %v as encoding/json", in, got, want)
		}
	}
}

// TestDepthCountsObjectsAndNotScalars: nesting counts every object and
// array, and a scalar at the deepest level adds none.
func TestDepthCountsObjectsAndNotScalars(t *testing.T) {
	nest := func(n int, open, close, inner string) []byte {
		return []byte(strings.Repeat(open, n) + inner + strings.Repeat(close, n))
	}
	for _, c := range []struct {
		name string
		in   []byte
		want bool
	}{
		{"objects at the limit", nest(MaxDepth, `{"a":`, `}`, `1`), true},
		{"objects past the limit", nest(MaxDepth+1, `{"a":`, `}`, `1`), false},
		{"a number in arrays at the limit", nest(MaxDepth, `[`, `]`, `1`), true},
		{"a string in arrays at the limit", nest(MaxDepth, `[`, `]`, `"s"`), true},
	} {
		if got := Valid(c.in); got != c.want || json.Valid(c.in) != c.want {
			t.Errorf("%s: Valid %v, want %v as encoding/json", c.name, got, c.want)
		}
	}
	// Object's own braces are the first level.
	if _, err := Object(nest(MaxDepth, `{"a":`, `}`, `1`)); err != nil {
		t.Errorf("objects at the limit: %v", err)
	}
	if _, err := Object(nest(MaxDepth+1, `{"a":`, `}`, `1`)); !errors.Is(err, ErrSyntax) {
		t.Errorf("objects past the limit: %v, want ErrSyntax", err)
	}
}
