package strictjson_test

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/strictjson"
)

type doc struct {
	A int    `json:"a"`
	B string `json:"b,omitempty"`
}

const big = 1 << 20

func TestDecodeAccepts(t *testing.T) {
	for _, raw := range []string{`{"a":1}`, ` {"a":1,"b":"x"} `, "{\"a\":1}\n", `{}`, "\t{\"b\":\"}]\"}\r\n"} {
		var d doc
		if err := strictjson.Decode([]byte(raw), &d, big); err != nil {
			t.Errorf("Decode(%q): %v", raw, err)
		}
	}
}

// TestDecodeTrailing: nothing but white space may follow the value; a
// stray closing bracket is trailing data too (the hole Decoder.More leaves).
func TestDecodeTrailing(t *testing.T) {
	for _, raw := range []string{`{"a":1}}`, `{"a":1}]`, `{} {}`, `{}x`, `{},`, `{} null`, `{}{"a":2}`} {
		var d doc
		if err := strictjson.Decode([]byte(raw), &d, big); !errors.Is(err, strictjson.ErrTrailing) {
			t.Errorf("Decode(%q) = %v, want ErrTrailing", raw, err)
		}
	}
	var v any
	if err := strictjson.Decode([]byte(`[1]]`), &v, big, strictjson.AnyValue); !errors.Is(err, strictjson.ErrTrailing) {
		t.Errorf("Decode([1]]) = %v, want ErrTrailing", err)
	}
}

func TestDecodeNotObject(t *testing.T) {
	for _, raw := range []string{`null`, `[]`, `"a"`, `1`, `true`, ` [{"a":1}]`} {
		var d doc
		if err := strictjson.Decode([]byte(raw), &d, big); !errors.Is(err, strictjson.ErrNotObject) {
			t.Errorf("Decode(%q) = %v, want ErrNotObject", raw, err)
		}
	}
	var ts []doc
	if err := strictjson.Decode([]byte(`[{"a":1}]`), &ts, big, strictjson.AnyValue); err != nil || len(ts) != 1 || ts[0].A != 1 {
		t.Errorf("AnyValue array: %v %+v", err, ts)
	}
}

func TestDecodeMalformed(t *testing.T) {
	var d doc
	if err := strictjson.Decode(nil, &d, big); !errors.Is(err, io.EOF) {
		t.Errorf("empty: %v, want io.EOF", err)
	}
	if err := strictjson.Decode([]byte(`{"a":`), &d, big); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated: %v, want io.ErrUnexpectedEOF", err)
	}
	var syn *json.SyntaxError
	if err := strictjson.Decode([]byte(`{"a":x}`), &d, big); !errors.As(err, &syn) || syn.Offset != 6 {
		t.Errorf("syntax: %v, want a SyntaxError at byte 6", err)
	}
	var typ *json.UnmarshalTypeError
	if err := strictjson.Decode([]byte(`{"a":"1"}`), &d, big); !errors.As(err, &typ) || typ.Field != "a" {
		t.Errorf("wrong type: %v, want an UnmarshalTypeError on a", err)
	}
}

func TestDecodeUnknownFields(t *testing.T) {
	type outer struct {
		In doc `json:"in"`
	}
	var o outer
	var fe *strictjson.FieldError
	if err := strictjson.Decode([]byte(`{"in":{"a":1,"zz":2}}`), &o, big); !errors.As(err, &fe) || fe.Field != "zz" || fe.Repeated {
		t.Errorf("nested unknown: %v, want FieldError zz", err)
	}
	var d doc
	if err := strictjson.Decode([]byte(`{"a":1,"new":[1,2]}`), &d, big, strictjson.AllowUnknownFields); err != nil || d.A != 1 {
		t.Errorf("AllowUnknownFields: %v %+v", err, d)
	}
}

// TestDecodeExactKeys: encoding/json matches keys case-insensitively and
// lets a repeated key win; ExactKeys refuses both.
func TestDecodeExactKeys(t *testing.T) {
	cases := []struct {
		raw, field string
		repeated   bool
	}{
		{`{"A":1}`, "A", false},
		{`{"a":1,"a":2}`, "a", true},
		{`{"b":"x","zz":1}`, "zz", false},
	}
	for _, c := range cases {
		var d doc
		var fe *strictjson.FieldError
		err := strictjson.Decode([]byte(c.raw), &d, big, strictjson.ExactKeys)
		if !errors.As(err, &fe) || fe.Field != c.field || fe.Repeated != c.repeated {
			t.Errorf("Decode(%s) = %v, want FieldError{%q, %v}", c.raw, err, c.field, c.repeated)
		}
	}
	var d doc
	if err := strictjson.Decode([]byte(`{"A":1}`), &d, big); err != nil || d.A != 1 {
		t.Errorf("without ExactKeys a case-folded key matches, as in encoding/json: %v", err)
	}
}

// TestDecodeSize: the bound is inclusive.
func TestDecodeSize(t *testing.T) {
	raw := []byte(`{"a":1}` + strings.Repeat(" ", 93))
	var d doc
	if err := strictjson.Decode(raw, &d, 100); err != nil {
		t.Errorf("100 bytes at a bound of 100: %v", err)
	}
	if err := strictjson.Decode(append(raw, ' '), &d, 100); !errors.Is(err, strictjson.ErrTooLarge) {
		t.Errorf("101 bytes at a bound of 100: %v, want ErrTooLarge", err)
	}
}

// TestDecodeDepth: 64 levels of nesting are accepted, 65 are not, and
// brackets inside strings do not count.
func TestDecodeDepth(t *testing.T) {
	nest := func(n int) []byte {
		return []byte(`{"a":1,"n":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}`)
	}
	var v map[string]any
	if err := strictjson.Decode(nest(64), &v, big); err != nil {
		t.Errorf("depth 64: %v", err)
	}
	if err := strictjson.Decode(nest(65), &v, big); !errors.Is(err, strictjson.ErrTooDeep) {
		t.Errorf("depth 65: %v, want ErrTooDeep", err)
	}
	quoted := []byte(`{"s":"` + strings.Repeat(`[{\"`, 100) + `"}`)
	if err := strictjson.Decode(quoted, &v, big); err != nil {
		t.Errorf("brackets in a string: %v", err)
	}
}

// FuzzDecode checks the decoder against json.Unmarshal, which validates the
// whole input: a document is accepted as any value exactly when it is one
// valid JSON value, and as an object only when it is one.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"a":1}`, `{"a":1}}`, `{"a":1}]`, `{} {}`, `[1]]`, `null`, `{"a":[{"b":"}"}]}`,
		`{"a":"\"}"}}`, ` {} `, ``, `{`, `{"a":1,"a":2}`, `"x"`, `[[[[]]]]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var got any
		err := strictjson.Decode(raw, &got, big, strictjson.AnyValue)
		if errors.Is(err, strictjson.ErrTooDeep) {
			return
		}
		var want any
		werr := json.Unmarshal(raw, &want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("Decode(%q) = %v, json.Unmarshal = %v", raw, err, werr)
		}
		var obj map[string]any
		oerr := strictjson.Decode(raw, &obj, big)
		_, isObj := want.(map[string]any)
		if (oerr == nil) != (werr == nil && isObj) {
			t.Fatalf("Decode(%q) as an object = %v; valid %v, object %v", raw, oerr, werr == nil, isObj)
		}
	})
}
