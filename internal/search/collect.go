package search

import (
	"cmp"
	"container/heap"
	"slices"
	"sync"
	"sync/atomic"
)

// match is a match as collected; path holds the exact bytes.
type match struct {
	path      string
	line      int
	text      string
	textTrunc bool
}

// key is a position in the output order.
type key struct {
	path string
	line int
}

// comparePath orders paths component by component: it compares bytes, with
// '/' below every other byte. Since '/' separates components and never
// occurs inside one, this is the order of a depth-first walk that visits each
// directory's entries in byte order ("a/z" < "a.txt", because "a" < "a.txt").
func comparePath(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		switch {
		case ca == '/':
			return -1
		case cb == '/':
			return 1
		case ca < cb:
			return -1
		default:
			return 1
		}
	}
	return cmp.Compare(len(a), len(b))
}

func compareMatch(a, b *match) int {
	if c := comparePath(a.path, b.path); c != 0 {
		return c
	}
	return cmp.Compare(a.line, b.line)
}

// after reports whether (path, line) sorts after k.
func (k *key) after(path string, line int) bool {
	if c := comparePath(path, k.path); c != 0 {
		return c > 0
	}
	return line > k.line
}

// collector keeps the first max matches in output order: a max-heap of at
// most max entries, so memory is bounded however many matches exist and the
// kept set does not depend on the order in which workers deliver matches.
type collector struct {
	max int

	mu        sync.Mutex
	h         maxHeap
	truncated bool // more than max matches exist (one was dropped)

	// cutoff is the last kept match once the result is known to be
	// truncated; anything after it can never be returned, so workers prune
	// files and directories that sort after it. Nil until then.
	cutoff atomic.Pointer[key]
}

// add merges the matches of one file, in line order. overflow says the file
// had more matches than ms holds.
func (c *collector) add(ms []match, overflow bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if overflow {
		c.truncated = true
	}
	for i := range ms {
		if len(c.h) < c.max {
			heap.Push(&c.h, ms[i])
			continue
		}
		c.truncated = true
		if compareMatch(&ms[i], &c.h[0]) >= 0 {
			break // the rest of this file's matches sort later still
		}
		c.h[0] = ms[i]
		heap.Fix(&c.h, 0)
	}
	if c.truncated && len(c.h) == c.max {
		top := &c.h[0]
		if cur := c.cutoff.Load(); cur == nil || cur.path != top.path || cur.line != top.line {
			c.cutoff.Store(&key{path: top.path, line: top.line})
		}
	}
}

// pruned reports whether nothing at or under path can be returned any more.
func (c *collector) pruned(path string) bool {
	k := c.cutoff.Load()
	return k != nil && comparePath(path, k.path) > 0
}

func (c *collector) sorted() []match {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone([]match(c.h))
	slices.SortFunc(out, func(a, b match) int { return compareMatch(&a, &b) })
	return out
}

type maxHeap []match

func (h maxHeap) Len() int           { return len(h) }
func (h maxHeap) Less(i, j int) bool { return compareMatch(&h[i], &h[j]) > 0 }
func (h maxHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *maxHeap) Push(x any)        { *h = append(*h, x.(match)) }
func (h *maxHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
