package limits

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// docRow is a row of docs/limits.md: | bound | `Constant` | value | ... |.
var docRow = regexp.MustCompile("(?m)^\\| [^|]+ \\| `(\\w+)` \\| (\\d+)(?: (bytes|KiB|MiB|ms|s|min|h|days))? \\|")

var docUnits = map[string]int64{
	"": 1, "bytes": 1, "KiB": kib, "MiB": mib,
	"ms": int64(time.Millisecond), "s": int64(time.Second), "min": int64(time.Minute), "h": int64(time.Hour), "days": int64(day),
}

// TestLimitsDocMatches: docs/limits.md has a row for every bound, with
// the value this build uses.
func TestLimitsDocMatches(t *testing.T) {
	doc, err := os.ReadFile("../../docs/limits.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]int64{}
	for _, m := range docRow.FindAllStringSubmatch(string(doc), -1) {
		n, err := strconv.ParseInt(m[2], 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", m[1], err)
		}
		rows[m[1]] = n * docUnits[m[3]]
	}
	for _, name := range declared(t) {
		var want int64
		if c, ok := counts[name]; ok {
			want = c.got
		} else if d, ok := durations[name]; ok {
			want = int64(d.got)
		} else {
			continue // TestBoundsPinned reports it
		}
		got, ok := rows[name]
		switch {
		case !ok:
			t.Errorf("docs/limits.md has no row for limits.%s with a value like 32, 64 KiB or 15 s", name)
		case got != want:
			t.Errorf("docs/limits.md gives limits.%s as %d, the build uses %d", name, got, want)
		}
	}
}
