package proclist

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/commandcore/commandcore/internal/limits"
)

// FuzzFormatArgs: whatever a process's command line holds (it is read from
// /proc, any bytes), args is valid UTF-8 without control characters, at
// most the bound, cut only when the line is longer, and otherwise the
// arguments joined by spaces.
func FuzzFormatArgs(f *testing.F) {
	f.Add("sleep", "61", "")
	f.Add("sh", "-c", "echo \x1b[2J\ttab")
	f.Add("\xff\xfe", "caf\xc3", "\u00e9\u2028\u0085")
	f.Add(strings.Repeat("é", 3000), "x", "y")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		argv := []string{a, b, c}
		line, truncated := formatArgs(argv)
		if !utf8.ValidString(line) || len(line) > limits.ProcessArgsMaxBytes {
			t.Fatalf("args %q: %d bytes, valid UTF-8 %v", line, len(line), utf8.ValidString(line))
		}
		if strings.IndexFunc(line, unicode.IsControl) >= 0 {
			t.Fatalf("args %q hold a control character", line)
		}
		joined := strings.Join(argv, " ")
		runes := 0
		for range joined {
			runes++
		}
		// Each character (or invalid byte) of the line shows as one.
		if !truncated && utf8.RuneCountInString(line) != runes {
			t.Fatalf("args %q of %q: %d characters of %d, not truncated", line, joined, utf8.RuneCountInString(line), runes)
		}
		if !truncated && utf8.ValidString(joined) && strings.IndexFunc(joined, unicode.IsControl) < 0 && line != joined {
			t.Fatalf("args %q, want %q", line, joined)
		}
		if truncated && len(joined) <= limits.ProcessArgsMaxBytes {
			t.Fatalf("a line of %d bytes was cut", len(joined))
		}
	})
}
