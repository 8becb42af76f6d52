// Package jsonspan finds the members of a JSON object as spans of the
// bytes it was given, validating the whole text in one pass and decoding
// nothing. The relay uses it to forward tool calls, results and progress
// without decoding and re-encoding what it only passes on.
//
// It is strict where a forwarder must be: a key written with an escape
// or in invalid UTF-8, or a key given twice, is ErrAmbiguous, because a later decoder may read
// such an object differently from the forwarder (encoding/json takes the
// last of two equal keys, and unescapes keys before matching them).
package jsonspan

import (
	"bytes"
	"errors"
	"unicode/utf8"
)

// MaxDepth bounds nesting, as encoding/json does.
const MaxDepth = 10000

var (
	// ErrSyntax: the text is not one valid JSON value of the kind asked.
	ErrSyntax = errors.New("jsonspan: invalid JSON")
	// ErrAmbiguous: an object key is escaped or repeated.
	ErrAmbiguous = errors.New("jsonspan: escaped or repeated object key")
)

// Member is one member of an object: its key as written between the
// quotes (never escaped), and its value's bytes.
type Member struct {
	Key   string
	Value []byte
}

// Object reads data as exactly one JSON object (whitespace around it
// allowed) and returns its members in order. Nested values are validated
// but not split.
func Object(data []byte) ([]Member, error) {
	s := scanner{data: data}
	s.space()
	if s.peek() != '{' {
		return nil, ErrSyntax
	}
	var members []Member
	err := s.list('}', func() error {
		key, escaped, value, err := s.member(1)
		if err != nil {
			return err
		}
		k := string(key)
		if escaped || !utf8.ValidString(k) {
			return ErrAmbiguous
		}
		for _, m := range members {
			if m.Key == k {
				return ErrAmbiguous
			}
		}
		members = append(members, Member{Key: k, Value: data[value:s.i]})
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.space()
	if s.i != len(s.data) {
		return nil, ErrSyntax
	}
	return members, nil
}

// Find returns the value of the member named key, or nil.
func Find(members []Member, key string) []byte {
	for _, m := range members {
		if m.Key == key {
			return m.Value
		}
	}
	return nil
}

// Valid reports whether data is one valid JSON value.
func Valid(data []byte) bool {
	s := scanner{data: data}
	s.space()
	if s.value(0) != nil {
		return false
	}
	s.space()
	return s.i == len(s.data)
}

// String returns the text of a JSON string value that has no escapes, and
// false for any other value: a caller compares it with a name it knows.
func String(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' || bytes.IndexByte(v, '\\') >= 0 {
		return "", false
	}
	return string(v[1 : len(v)-1]), true
}

type scanner struct {
	data []byte
	i    int
}

func (s *scanner) peek() byte {
	if s.i < len(s.data) {
		return s.data[s.i]
	}
	return 0
}

func (s *scanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// member reads one object member inside depth containers: its key as
// written between the quotes, whether the key held an escape, and where
// the value starts (it ends at s.i). Object counts an escaped key, or one
// not valid UTF-8, as ambiguous: encoding/json reads every invalid byte as
// U+FFFD, so two different keys could become one.
func (s *scanner) member(depth int) (key []byte, escaped bool, value int, err error) {
	start := s.i
	if escaped, err = s.str(); err != nil {
		return nil, false, 0, err
	}
	key = s.data[start+1 : s.i-1]
	s.space()
	if s.peek() != ':' {
		return nil, false, 0, ErrSyntax
	}
	s.i++
	s.space()
	value = s.i
	return key, escaped, value, s.value(depth)
}

// list reads the rest of an object or array from its opening byte: items,
// separated by commas, up to close.
func (s *scanner) list(close byte, item func() error) error {
	s.i++
	s.space()
	if s.peek() == close {
		s.i++
		return nil
	}
	for {
		s.space()
		if err := item(); err != nil {
			return err
		}
		s.space()
		c := s.peek()
		s.i++
		switch c {
		case close:
			return nil
		case ',':
		default:
			return ErrSyntax
		}
	}
}

// value reads one value inside depth containers.
func (s *scanner) value(depth int) error {
	if s.peek() == '{' || s.peek() == '[' {
		if depth+1 > MaxDepth {
			return ErrSyntax
		}
	}
	switch c := s.peek(); {
	case c == '"':
		_, err := s.str()
		return err
	case c == '{':
		return s.object(depth + 1)
	case c == '[':
		return s.array(depth + 1)
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	}
	return ErrSyntax
}

func (s *scanner) object(depth int) error {
	return s.list('}', func() error {
		_, _, _, err := s.member(depth)
		return err
	})
}

func (s *scanner) array(depth int) error {
	return s.list(']', func() error { return s.value(depth) })
}

func (s *scanner) literal(word string) error {
	if !bytes.HasPrefix(s.data[s.i:], []byte(word)) {
		return ErrSyntax
	}
	s.i += len(word)
	return nil
}

// str reads a string and reports whether it held an escape.
func (s *scanner) str() (escaped bool, err error) {
	if s.peek() != '"' {
		return false, ErrSyntax
	}
	s.i++
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '"':
			s.i++
			return escaped, nil
		case c == '\\':
			escaped = true
			if err := s.escape(); err != nil {
				return false, err
			}
		case c < 0x20:
			return false, ErrSyntax
		default:
			s.i++
		}
	}
	return false, ErrSyntax
}

func (s *scanner) escape() error {
	s.i++ // '\\'
	switch s.peek() {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i++
		return nil
	case 'u':
		s.i++
		if s.i+4 > len(s.data) {
			return ErrSyntax
		}
		for _, h := range s.data[s.i : s.i+4] {
			if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
				return ErrSyntax
			}
		}
		s.i += 4
		return nil
	}
	return ErrSyntax
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.data) && s.data[s.i] >= '0' && s.data[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *scanner) number() error {
	if s.peek() == '-' {
		s.i++
	}
	switch c := s.peek(); {
	case c == '0':
		s.i++
	case c >= '1' && c <= '9':
		s.digits()
	default:
		return ErrSyntax
	}
	if s.peek() == '.' {
		s.i++
		if s.digits() == 0 {
			return ErrSyntax
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if s.digits() == 0 {
			return ErrSyntax
		}
	}
	return nil
}
