package fileops

import (
	"bytes"
	"fmt"
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
