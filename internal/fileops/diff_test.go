package fileops

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// patch applies a unified diff to a, as patch(1) would with no fuzz, and
// fails on a hunk that does not fit.
func patch(a []byte, diff string) ([]byte, error) {
	lines := splitLines(a)
	body := strings.SplitAfter(diff, "\n")
	if len(body) < 2 || !strings.HasPrefix(body[0], "--- ") || !strings.HasPrefix(body[1], "+++ ") {
		return nil, fmt.Errorf("no header")
	}
	var out [][]byte
	next := 0 // the first line of a not yet copied
	for i := 2; i < len(body) && body[i] != ""; {
		f := strings.Fields(body[i])
		if len(f) != 4 || f[0] != "@@" || f[3] != "@@" {
			return nil, fmt.Errorf("bad hunk header %q", body[i])
		}
		as, al := rangeOf(f[1][1:])
		start := as - 1
		if al == 0 {
			start = as
		}
		if start < next {
			return nil, fmt.Errorf("hunks overlap")
		}
		out = append(out, lines[next:start]...)
		next = start
		i++
		for i < len(body) && body[i] != "" && !strings.HasPrefix(body[i], "@@") {
			l := body[i]
			i++
			text := []byte(l[1:])
			if i < len(body) && strings.HasPrefix(body[i], "\\") {
				text = text[:len(text)-1]
				i++
			}
			switch l[0] {
			case ' ', '-':
				if next >= len(lines) || !bytes.Equal(lines[next], text) {
					return nil, fmt.Errorf("hunk does not fit at line %d", next+1)
				}
				if l[0] == ' ' {
					out = append(out, text)
				}
				next++
			case '+':
				out = append(out, text)
			default:
				return nil, fmt.Errorf("bad line %q", l)
			}
		}
	}
	out = append(out, lines[next:]...)
	return bytes.Join(out, nil), nil
}

// rangeOf reads "start,count", or "start" for one line.
func rangeOf(s string) (start, n int) {
	if a, b, ok := strings.Cut(s, ","); ok {
		start, _ = strconv.Atoi(a)
		n, _ = strconv.Atoi(b)
		return start, n
	}
	start, _ = strconv.Atoi(s)
	return start, 1
}

func TestDiffHunks(t *testing.T) {
	var a strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&a, "line %d\n", i)
	}
	b := strings.Replace(strings.Replace(a.String(), "line 2\n", "line two\n", 1), "line 29\n", "", 1) + "tail"
	d, truncated := Diff("f", []byte(a.String()), []byte(b), 1<<20)
	want := `--- f
+++ f
@@ -1,5 +1,5 @@
 line 1
-line 2
+line two
 line 3
 line 4
 line 5
@@ -26,5 +26,5 @@
 line 26
 line 27
 line 28
-line 29
 line 30
+tail
\ No newline at end of file
`
	if d != want || truncated {
		t.Fatalf("diff:\n%s\nwant:\n%s", d, want)
	}
	if got, err := patch([]byte(a.String()), d); err != nil || string(got) != b {
		t.Fatalf("patch: %v\n%q", err, got)
	}
	if d, tr := Diff("f", []byte(a.String()), []byte(b), 60); !tr || len(d) > 60 || !strings.HasSuffix(d, "\n") {
		t.Fatalf("bounded diff %q (truncated %v)", d, tr)
	}
	if d, _ := Diff("f", []byte("same"), []byte("same"), 100); d != "" {
		t.Fatalf("diff of equal files: %q", d)
	}
}

// TestDiffOfAManyLineChange stays correct past the edit-script budget.
func TestDiffOfAManyLineChange(t *testing.T) {
	var a, b strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&a, "a%d\n", i)
		fmt.Fprintf(&b, "b%d\n", i)
	}
	d, truncated := Diff("f", []byte(a.String()), []byte(b.String()), 1<<20)
	if truncated {
		t.Fatal("truncated")
	}
	if got, err := patch([]byte(a.String()), d); err != nil || string(got) != b.String() {
		t.Fatalf("patch: %v", err)
	}
}

// FuzzDiff: a diff that is not truncated turns a into b.
func FuzzDiff(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), []byte("a\nc\nd"))
	f.Add([]byte(""), []byte("x\n"))
	f.Add([]byte("1\n2\n3\n4\n5\n6\n7\n8\n9\n"), []byte("1\n2\nx\n4\n5\n6\n7\n8\ny\n"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		if !utfOK(a) || !utfOK(b) {
			return // the diff of bytes that are not text is shown, not exact
		}
		d, truncated := Diff("f", a, b, 1<<20)
		if bytes.Equal(a, b) {
			if d != "" || truncated {
				t.Fatalf("diff of equal files: %q", d)
			}
			return
		}
		if truncated {
			return
		}
		got, err := patch(a, d)
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("patch(a, diff) = %q, %v; want %q\n%s", got, err, b, d)
		}
	})
}

func utfOK(b []byte) bool { return strings.ToValidUTF8(string(b), "\uFFFD") == string(b) }

// lcs is the length of the longest common subsequence of a's and b's lines.
func lcs(a, b [][]byte) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for i := range a {
		for j := range b {
			switch {
			case bytes.Equal(a[i], b[j]):
				cur[j+1] = prev[j] + 1
			default:
				cur[j+1] = max(prev[j+1], cur[j])
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// TestDiffIsMinimalAndApplies: over many small files of few distinct
// lines, where shortest scripts are hard to find, the diff turns a into b
// and deletes and inserts no more lines than the shortest edit script.
func TestDiffIsMinimalAndApplies(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	gen := func() []byte {
		var b strings.Builder
		for range rng.IntN(14) {
			b.WriteString([]string{"x\n", "y\n", "z\n"}[rng.IntN(3)])
		}
		if rng.IntN(4) == 0 {
			b.WriteString("end")
		}
		return []byte(b.String())
	}
	for range 3000 {
		a, b := gen(), gen()
		d, truncated := Diff("f", a, b, 1<<20)
		if bytes.Equal(a, b) {
			continue
		}
		if truncated {
			t.Fatalf("a small diff is truncated")
		}
		if got, err := patch(a, d); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("patch(%q, diff) = %q, %v\n%s", a, got, err, d)
		}
		changed := 0
		for _, l := range strings.Split(d, "\n")[2:] {
			if strings.HasPrefix(l, "-") || strings.HasPrefix(l, "+") {
				changed++
			}
		}
		al, bl := splitLines(a), splitLines(b)
		if want := len(al) + len(bl) - 2*lcs(al, bl); changed != want {
			t.Fatalf("diff of %q to %q changes %d lines, the shortest script %d:\n%s", a, b, changed, want, d)
		}
	}
}

// numbered is n lines "1\n" .. "n\n".
func numbered(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i+1) + "\n"
	}
	return out
}

// TestDiffHunksShareWithinTwiceTheContext: two changes with six unchanged
// lines between them share a hunk, with seven they do not; context is
// three lines, fewer at the ends of the file.
func TestDiffHunksShareWithinTwiceTheContext(t *testing.T) {
	change := func(lines []string, at ...int) string {
		out := slices.Clone(lines)
		for _, i := range at {
			out[i] = "changed\n"
		}
		return strings.Join(out, "")
	}
	base := numbered(20)
	a := strings.Join(base, "")
	headers := func(d string) []string {
		var out []string
		for _, l := range strings.Split(d, "\n") {
			if strings.HasPrefix(l, "@@") {
				out = append(out, l)
			}
		}
		return out
	}
	for _, c := range []struct {
		at   []int
		want []string
	}{
		{[]int{5, 12}, []string{"@@ -3,14 +3,14 @@"}},                    // six between
		{[]int{5, 13}, []string{"@@ -3,7 +3,7 @@", "@@ -11,7 +11,7 @@"}}, // seven between
		{[]int{0}, []string{"@@ -1,4 +1,4 @@"}},
		{[]int{19}, []string{"@@ -17,4 +17,4 @@"}},
		{[]int{1}, []string{"@@ -1,5 +1,5 @@"}},
	} {
		d, _ := Diff("f", []byte(a), []byte(change(base, c.at...)), 1<<20)
		if got := headers(d); !slices.Equal(got, c.want) {
			t.Errorf("changes at %v: hunks %v, want %v\n%s", c.at, got, c.want, d)
		}
	}
	// Lines added at the top or the bottom, and a file emptied or filled.
	for _, c := range []struct{ a, b, want string }{
		{"1\n2\n", "0\n1\n2\n", "@@ -1,2 +1,3 @@"},
		{"1\n2\n", "1\n2\n3\n", "@@ -1,2 +1,3 @@"},
		{"1\n2\n3\n4\n", "1\n2\n3\n4\n5\n", "@@ -2,3 +2,4 @@"},
		{"1\n2\n3\n4\n5\n", "1\n2\n3\n4\n5\n6\n", "@@ -3,3 +3,4 @@"},
		{"1\n2\n", "", "@@ -1,2 +0,0 @@"},
		{"", "1\n", "@@ -0,0 +1 @@"},
	} {
		d, _ := Diff("f", []byte(c.a), []byte(c.b), 1<<20)
		if got := headers(d); len(got) != 1 || got[0] != c.want {
			t.Errorf("%q to %q: hunks %v, want %s\n%s", c.a, c.b, got, c.want, d)
		}
	}
}

// TestDiffLimitIsExact: a diff exactly as long as the limit is whole; one
// byte less cuts it at a line boundary, and a limit that falls where the
// first hunk ends still says the rest was cut.
func TestDiffLimitIsExact(t *testing.T) {
	base := numbered(40)
	b := slices.Clone(base)
	b[2], b[30] = "two\n", "thirty\n"
	a, bb := []byte(strings.Join(base, "")), []byte(strings.Join(b, ""))
	full, truncated := Diff("f", a, bb, 1<<20)
	if truncated {
		t.Fatal("truncated at 1 MiB")
	}
	if d, tr := Diff("f", a, bb, len(full)); d != full || tr {
		t.Errorf("limit = its length: truncated %v", tr)
	}
	d, tr := Diff("f", a, bb, len(full)-1)
	if !tr || len(d) > len(full)-1 || !strings.HasSuffix(d, "\n") || !strings.HasPrefix(full, d) {
		t.Errorf("one byte less: truncated %v, %q", tr, d)
	}
	second := strings.LastIndex(full, "@@ -")
	if d, tr := Diff("f", a, bb, second); !tr || d != full[:second] {
		t.Errorf("limit at the second hunk: truncated %v\n%s", tr, d)
	}
	// Within a hunk: cut after a whole line, never inside one.
	line := strings.Index(full, " 2\n") + len(" 2\n")
	if d, tr := Diff("f", a, bb, line); !tr || d != full[:line] {
		t.Errorf("limit at a line end inside a hunk: truncated %v %q", tr, d)
	}
	if d, tr := Diff("f", a, bb, line+1); !tr || d != full[:line] {
		t.Errorf("limit a byte into a line: truncated %v %q", tr, d)
	}
}

// TestMyersAloneIsShortest: the edit script search, given files that share
// their first and last lines too (which Diff strips before it), returns a
// script that turns a into b, of the shortest length.
func TestMyersAloneIsShortest(t *testing.T) {
	lines := func(s string) [][]byte { return splitLines([]byte(s)) }
	for _, c := range []struct{ a, b string }{
		{"p\nq\nx\ny\nq\n", "p\nq\ny\nz\nq\n"},
		{"p\np\nx\n", "p\np\ny\n"},
		{"s\nx\ns\n", "s\ny\ns\n"},
		{"a\n", "a\nb\n"},
	} {
		a, b := lines(c.a), lines(c.b)
		ops, ok := myers(a, b)
		if !ok {
			t.Fatalf("%q to %q: no script", c.a, c.b)
		}
		var got [][]byte
		changes, ai, bi := 0, 0, 0
		for _, o := range ops {
			switch o.kind {
			case opEqual:
				if o.a != ai || o.b != bi || !bytes.Equal(a[o.a], b[o.b]) {
					t.Fatalf("%q to %q: equal op %+v at a %d b %d", c.a, c.b, o, ai, bi)
				}
				got = append(got, a[o.a])
				ai, bi = ai+1, bi+1
			case opDelete:
				if o.a != ai {
					t.Fatalf("%q to %q: delete op %+v at a %d", c.a, c.b, o, ai)
				}
				ai++
				changes++
			case opInsert:
				got = append(got, b[o.b])
				bi++
				changes++
			}
		}
		if !bytes.Equal(bytes.Join(got, nil), []byte(c.b)) || ai != len(a) || bi != len(b) {
			t.Errorf("%q to %q: the script makes %q", c.a, c.b, bytes.Join(got, nil))
		}
		if want := len(a) + len(b) - 2*lcs(a, b); changes != want {
			t.Errorf("%q to %q: %d changes, the shortest %d", c.a, c.b, changes, want)
		}
	}
}

// TestDiffAtTheChangeBudgetIsShortest: an edit of exactly maxDiffChanges
// line changes still gets the shortest script, keeping the one line the
// two sides share; one more change gets the whole region replaced.
func TestDiffAtTheChangeBudgetIsShortest(t *testing.T) {
	side := func(prefix string, n int) []byte {
		var b strings.Builder
		for i := range n {
			if i == n/2 {
				b.WriteString("shared\n")
			}
			fmt.Fprintf(&b, "%s%d\n", prefix, i)
		}
		return []byte(b.String())
	}
	count := func(d string) (changed int) {
		for _, l := range strings.Split(d, "\n")[2:] {
			if strings.HasPrefix(l, "-") || strings.HasPrefix(l, "+") {
				changed++
			}
		}
		return changed
	}
	// 500 lines each side besides the shared one: 1000 changes.
	a, b := side("a", maxDiffChanges/2), side("b", maxDiffChanges/2)
	if d, _ := Diff("f", a, b, 1<<30); count(d) != maxDiffChanges {
		t.Errorf("at the budget: %d changes, want %d", count(d), maxDiffChanges)
	}
	a, b = side("a", maxDiffChanges/2+1), side("b", maxDiffChanges/2)
	if d, _ := Diff("f", a, b, 1<<30); count(d) != maxDiffChanges+3 {
		t.Errorf("past the budget: %d changes, want the region replaced, %d", count(d), maxDiffChanges+3)
	}
}

// TestDiffLimitInsideTheLastHunk: a limit at a line end inside the only
// hunk cuts there and says so.
func TestDiffLimitInsideTheLastHunk(t *testing.T) {
	a := []byte(strings.Join(numbered(7), ""))
	b := []byte(strings.Replace(string(a), "4\n", "four\n", 1))
	full, _ := Diff("f", a, b, 1<<20)
	line := strings.Index(full, " 2\n") + len(" 2\n")
	if d, tr := Diff("f", a, b, line); !tr || d != full[:line] {
		t.Errorf("limit at a line end: truncated %v %q", tr, d)
	}
}
