package fileops

import (
	"bytes"
	"fmt"
	"strings"
)

// diffContext is the number of unchanged lines around each hunk.
const diffContext = 3

// maxDiffChanges bounds the search for the shortest edit script (Myers'
// D: lines deleted plus lines inserted), whose cost grows with its square.
// An edit that changes more lines gets a correct but longer diff: the
// changed region deleted and inserted whole.
const maxDiffChanges = 1000

// Diff is the unified diff from a to b of the file named name, cut at a
// line boundary to at most limit bytes (truncated then true). It is
// empty when a and b are equal.
func Diff(name string, a, b []byte, limit int) (diff string, truncated bool) {
	if bytes.Equal(a, b) {
		return "", false
	}
	al, bl := splitLines(a), splitLines(b)
	ops := script(al, bl)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", name, name)
	for _, h := range hunks(ops) {
		if out.Len() > limit {
			// The rest would be cut anyway.
			break
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(h.aStart, h.aLen), hunkRange(h.bStart, h.bLen))
		for _, o := range ops[h.from:h.to] {
			if out.Len() > limit {
				break
			}
			var prefix byte
			var line []byte
			switch o.kind {
			case opEqual:
				prefix, line = ' ', al[o.a]
			case opDelete:
				prefix, line = '-', al[o.a]
			case opInsert:
				prefix, line = '+', bl[o.b]
			}
			out.WriteByte(prefix)
			out.Write(line)
			if len(line) == 0 || line[len(line)-1] != '\n' {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
	}
	s := strings.ToValidUTF8(out.String(), "\uFFFD")
	if len(s) <= limit {
		return s, false
	}
	s = s[:limit]
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[:i+1]
	}
	return s, true
}

func hunkRange(start, n int) string {
	if n == 0 {
		// An empty range names the line before it.
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprint(start + 1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// splitLines splits b after each newline; a last line without one is kept.
func splitLines(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			out = append(out, b)
			break
		}
		out = append(out, b[:i+1])
		b = b[i+1:]
	}
	return out
}

type opKind byte

const (
	opEqual opKind = iota
	opDelete
	opInsert
)

// op is one line of an edit script: a is the line of a it keeps or
// deletes, b the line of b it keeps or inserts.
type op struct {
	kind opKind
	a, b int
}

// script is an edit script from a to b: the common ends kept, and between
// them the shortest script when it has at most maxDiffChanges changes.
func script(a, b [][]byte) []op {
	pre := 0
	for pre < len(a) && pre < len(b) && bytes.Equal(a[pre], b[pre]) {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && bytes.Equal(a[len(a)-1-suf], b[len(b)-1-suf]) {
		suf++
	}
	var ops []op
	for i := range pre {
		ops = append(ops, op{opEqual, i, i})
	}
	am, bm := a[pre:len(a)-suf], b[pre:len(b)-suf]
	mid, ok := myers(am, bm)
	if !ok {
		mid = mid[:0]
		for i := range am {
			mid = append(mid, op{opDelete, i, 0})
		}
		for j := range bm {
			mid = append(mid, op{opInsert, 0, j})
		}
	}
	for _, o := range mid {
		ops = append(ops, op{o.kind, o.a + pre, o.b + pre})
	}
	for i := range suf {
		ops = append(ops, op{opEqual, len(a) - suf + i, len(b) - suf + i})
	}
	return ops
}

// myers is Myers' O(ND) shortest edit script, or false when it needs more
// than maxDiffChanges changes.
func myers(a, b [][]byte) ([]op, bool) {
	n, m := len(a), len(b)
	limit := min(n+m, maxDiffChanges)
	off := limit + 1
	v := make([]int, 2*limit+3)
	var trace [][]int
	for d := 0; d <= limit; d++ {
		trace = append(trace, append([]int(nil), v[off-d-1:off+d+2]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || k != d && v[off+k-1] < v[off+k+1] {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && bytes.Equal(a[x], b[y]) {
				x, y = x+1, y+1
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(trace, n, m), true
			}
		}
	}
	return nil, false
}

// backtrack walks the trace of myers back from (n, m). trace[d] holds the
// diagonals -d-1..d+1 as they stood before step d.
func backtrack(trace [][]int, n, m int) []op {
	var ops []op
	x, y := n, m
	for d := len(trace) - 1; d > 0; d-- {
		v := trace[d]
		at := func(k int) int { return v[k+d+1] }
		k := x - y
		prevK := k - 1
		if k == -d || k != d && at(k-1) < at(k+1) {
			prevK = k + 1
		}
		prevX := at(prevK)
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			x, y = x-1, y-1
			ops = append(ops, op{opEqual, x, y})
		}
		if x == prevX {
			y--
			ops = append(ops, op{opInsert, x, y})
		} else {
			x--
			ops = append(ops, op{opDelete, x, y})
		}
	}
	for x > 0 && y > 0 {
		x, y = x-1, y-1
		ops = append(ops, op{opEqual, x, y})
	}
	for i, j := 0, len(ops)-1; i < j; i, j = i+1, j-1 {
		ops[i], ops[j] = ops[j], ops[i]
	}
	return ops
}

// hunk is ops[from:to], which covers a's lines aStart.. (aLen of them) and
// b's bStart.. (bLen).
type hunk struct {
	from, to     int
	aStart, aLen int
	bStart, bLen int
}

// hunks groups the changes of ops with diffContext unchanged lines around
// each; changes closer than twice that share a hunk.
func hunks(ops []op) []hunk {
	var out []hunk
	// a and b count the lines of each side before ops[pos].
	pos, a, b := 0, 0, 0
	advance := func(to int) {
		for ; pos < to; pos++ {
			if ops[pos].kind != opInsert {
				a++
			}
			if ops[pos].kind != opDelete {
				b++
			}
		}
	}
	for i := 0; i < len(ops); {
		if ops[i].kind == opEqual {
			i++
			continue
		}
		end := i
		for end < len(ops) {
			if ops[end].kind != opEqual {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == opEqual {
				run++
			}
			if run == len(ops) || run-end > 2*diffContext {
				break
			}
			end = run
		}
		h := hunk{from: max(i-diffContext, 0), to: min(end+diffContext, len(ops))}
		advance(h.from)
		h.aStart, h.bStart = a, b
		advance(h.to)
		h.aLen, h.bLen = a-h.aStart, b-h.bStart
		out = append(out, h)
		i = h.to
	}
	return out
}
