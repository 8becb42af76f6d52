// Package strictjson decodes documents that must hold exactly one JSON
// value: nothing but white space may follow it (a stray '}' or ']' is
// trailing data too), unknown fields are refused unless a format allows
// them, and size and nesting depth are checked before anything is decoded.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// MaxDepth bounds the nesting of objects and arrays in a document; the
// deepest legitimate one (the tool table) nests 6 levels.
const MaxDepth = 64

// Option relaxes or tightens Decode.
type Option int

const (
	// AllowUnknownFields accepts fields the target does not have, for
	// formats whose newer versions may add fields.
	AllowUnknownFields Option = 1 << iota
	// AnyValue accepts any JSON value, not only an object.
	AnyValue
	// ExactKeys refuses what encoding/json lets through at the top level:
	// a key that matches a field of the target struct only when case is
	// folded, and a key given twice.
	ExactKeys
)

var (
	// ErrTooLarge reports a document over the caller's size bound.
	ErrTooLarge = errors.New("document too large")
	// ErrTooDeep reports nesting beyond MaxDepth.
	ErrTooDeep = errors.New("document nested too deeply")
	// ErrNotObject reports a document whose value is not an object.
	ErrNotObject = errors.New("not a JSON object")
	// ErrTrailing reports data after the value.
	ErrTrailing = errors.New("trailing data after the JSON value")
)

// FieldError names a field the target does not accept: unknown (at any
// level), or, with ExactKeys, given twice at the top level. Field is what
// the document said; callers that answer remote clients clip it.
type FieldError struct {
	Field    string
	Repeated bool
}

func (e *FieldError) Error() string {
	if e.Repeated {
		return fmt.Sprintf("field %q is given twice", e.Field)
	}
	return fmt.Sprintf("unknown field %q", e.Field)
}

// Decode decodes data, at most maxBytes long, into v. Errors are
// ErrTooLarge, ErrTooDeep, ErrNotObject, ErrTrailing, a *FieldError, or
// encoding/json's own (*json.SyntaxError, *json.UnmarshalTypeError,
// io.EOF for an empty document, io.ErrUnexpectedEOF for a truncated one).
func Decode(data []byte, v any, maxBytes int, opts ...Option) error {
	var o Option
	for _, opt := range opts {
		o |= opt
	}
	if len(data) > maxBytes {
		return ErrTooLarge
	}
	if tooDeep(data, MaxDepth) {
		return ErrTooDeep
	}
	if o&AnyValue == 0 {
		// An empty document is left to the decoder: it is io.EOF.
		if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] != '{' {
			return ErrNotObject
		}
	}
	if o&ExactKeys != 0 {
		if err := checkKeys(data, v); err != nil {
			return err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if o&AllowUnknownFields == 0 {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return fieldError(err)
	}
	// Decoder.More misses a stray '}' or ']': only end of input will do.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ErrTrailing
	}
	return nil
}

// tooDeep reports whether data nests objects and arrays deeper than max.
// It only counts brackets outside strings; the decoder judges the syntax.
func tooDeep(data []byte, max int) bool {
	depth := 0
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > max {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// fieldError turns encoding/json's unknown-field error, which has no type
// of its own, into a *FieldError.
func fieldError(err error) error {
	const prefix = "json: unknown field "
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return err
	}
	var name string
	if json.Unmarshal([]byte(msg[len(prefix):]), &name) != nil {
		return err
	}
	return &FieldError{Field: name}
}

// checkKeys walks the top-level object's keys against the target struct's
// JSON names. Malformed input is left to the decoder proper.
func checkKeys(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	allowed := fieldNames(reflect.TypeOf(v))
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		if !allowed[key] {
			return &FieldError{Field: key}
		}
		if seen[key] {
			return &FieldError{Field: key, Repeated: true}
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// fieldNames returns the JSON names of a struct type's fields (through
// pointers); a type that is no struct has none.
func fieldNames(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	names := map[string]bool{}
	if t.Kind() != reflect.Struct {
		return names
	}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" {
			name = t.Field(i).Name
		}
		if name != "-" {
			names[name] = true
		}
	}
	return names
}
