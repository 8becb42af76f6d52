package namechars

import (
	"strings"
	"testing"
)

// TestValid: the whole set at either end of the bound, and each kind of
// byte outside it refused.
func TestValid(t *testing.T) {
	for _, ok := range []string{"a", "Z", "0", "9", ".", "_", "-", "dev-1.bo", strings.Repeat("x", 8)} {
		if !Valid(ok, 8) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 9), "a b", "a/b", "a:b", "é", "a\x00", "@", "`", "[", "{", "/"} {
		if Valid(bad, 8) {
			t.Errorf("%q accepted", bad)
		}
	}
	if !Valid("dev-1.box_A", 11) || Valid("dev-1.box_A", 10) {
		t.Error("the bound is not exact")
	}
}

// TestPrintable: text up to the bound, non-ASCII letters included; a
// control byte, a bidi or zero-width format character, a line separator,
// invalid UTF-8 or one byte too many refused.
func TestPrintable(t *testing.T) {
	for _, ok := range []string{"", "Password:", "café ☕", strings.Repeat("x", 8)} {
		if !Printable(ok, 12) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{strings.Repeat("x", 13), "a\nb", "a\tb", "\x1b[2J", "\xff", "a\x00", "\u0085",
		"\u202e", "a\u202ab", "\u2066x\u2069", "\u200b", "\u200f", "\u061c", "\ufeff", "\u00ad", "a\u2028b", "a\u2029b"} {
		if Printable(bad, 12) {
			t.Errorf("%q accepted", bad)
		}
	}
}
