// Package namechars is the one character rule of every name an owner
// gives: principals, device and token names, and the entries of a token's
// scopes. A name of these characters is safe as a URL path segment, a
// label value and a word in a log line.
package namechars

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Valid reports whether s is 1 to max bytes of ASCII letters, digits,
// '.', '_' and '-'.
func Valid(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Printable reports whether s is at most max bytes of valid UTF-8 without
// control characters, format characters (bidi overrides and isolates,
// zero-width ones) or line and paragraph separators: a line of free text
// (a job's name, a prompt shown to a person) that is safe to show and to
// log, and reads as what it says.
func Printable(s string, max int) bool {
	return len(s) <= max && utf8.ValidString(s) && strings.IndexFunc(s, Hidden) < 0
}

// Hidden reports whether r is not shown as itself: a control or format
// character, or a line or paragraph separator.
func Hidden(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}
