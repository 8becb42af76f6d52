package termscreen

import (
	"strings"
	"testing"
)

func TestAltScan(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		gapAt  int // the chunk after which bytes were lost, -1 for none
		want   byte
	}{
		{"none", []string{"plain text \x1b[1mbold\x1b[0m"}, -1, 0},
		{"1049 on", []string{"a\x1b[?1049hb"}, -1, 'h'},
		{"1049 off after on", []string{"\x1b[?1049h", "x\x1b[?1049l"}, -1, 'l'},
		{"47 and 1047", []string{"\x1b[?47h\x1b[?1047l\x1b[?47h"}, -1, 'h'},
		{"among other modes", []string{"\x1b[?1;1049;25h"}, -1, 'h'},
		{"last among other modes", []string{"\x1b[?25;1049l"}, -1, 'l'},
		{"other modes only", []string{"\x1b[?25l\x1b[?1h\x1b[?2004h"}, -1, 0},
		{"split in the introducer", []string{"x\x1b", "[?1049h"}, -1, 'h'},
		{"split after the introducer", []string{"x\x1b[", "?1049h"}, -1, 'h'},
		{"split in the number", []string{"x\x1b[?10", "49h"}, -1, 'h'},
		{"split across a gap", []string{"x\x1b[?10", "49h"}, 0, 0},
		{"not a mode sequence", []string{"\x1b[?1049x\x1b[?", "47"}, -1, 0},
		{"an overlong sequence", []string{"\x1b[?" + string(make([]byte, 40)) + "1049h"}, -1, 0},
		{"a huge number", []string{"\x1b[?99999999999999999999h"}, -1, 0},
		{"an overlong sequence, unfinished", []string{"\x1b[?" + strings.Repeat("1;", 20), "1049h"}, -1, 0},
		// Carried when the unfinished sequence is at most maxModeSeq
		// bytes, wherever it begins.
		{"unfinished at the longest carried", []string{"x\x1b[?" + strings.Repeat("0;", 13) + "104", "9h"}, -1, 'h'},
		{"unfinished one byte longer", []string{"x\x1b[?" + strings.Repeat("0;", 13) + "1049", "h"}, -1, 0},
		{"1049 before another mode", []string{"\x1b[?1049;1h"}, -1, 'h'},
		{"1047 before another mode", []string{"\x1b[?1047;1h"}, -1, 'h'},
		{"47 before another mode", []string{"\x1b[?47;1l"}, -1, 'l'},
		{"two other modes", []string{"\x1b[?1;2h\x1b[?25;1004l"}, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a altScan
			for i, c := range tc.chunks {
				a.scan([]byte(c), i > 0 && i-1 == tc.gapAt)
			}
			if a.last != tc.want {
				t.Fatalf("last switch %q, want %q", a.last, tc.want)
			}
		})
	}
}

func TestTitleIsText(t *testing.T) {
	if got := validText("ok\xff"); got != "ok\uFFFD" {
		t.Fatalf("validText: %q", got)
	}
}
