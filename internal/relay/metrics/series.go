package metrics

import (
	"bufio"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// contentType is the Prometheus text format's.
const contentType = "text/plain; version=0.0.4; charset=utf-8"

// label is one label's closed set of values, with "unknown" last when the
// set lacks it: a value outside the set is counted there.
type label struct {
	name   string
	values []string
	// known is how many values are the set's own; a series of the
	// "unknown" after them is shown once it has counted something.
	known int
}

func newLabel(name string, set []string) label {
	l := label{name: name, values: slices.Clone(set), known: len(set)}
	if !slices.Contains(set, unknown) {
		l.values = append(l.values, unknown)
	}
	return l
}

// index is v's place in the set, or unknown's.
func (l label) index(v string) int {
	if i := slices.Index(l.values, v); i >= 0 {
		return i
	}
	return slices.Index(l.values, unknown)
}

// grid is a counter for every combination of its labels' values.
type grid struct {
	labels []label
	// printed is the order the labels are printed in: by name.
	printed []int
	counts  []atomic.Uint64
}

func newGrid(labels ...label) grid {
	n := 1
	printed := make([]int, len(labels))
	for i, l := range labels {
		n *= len(l.values)
		printed[i] = i
	}
	slices.SortFunc(printed, func(a, b int) int { return strings.Compare(labels[a].name, labels[b].name) })
	return grid{labels: labels, printed: printed, counts: make([]atomic.Uint64, n)}
}

// cell is the counter of values, one per label.
func (g *grid) cell(values ...string) int {
	i := 0
	for k, l := range g.labels {
		i = i*len(l.values) + l.index(values[k])
	}
	return i
}

func (g *grid) inc(values ...string) { g.counts[g.cell(values...)].Add(1) }

// each calls f with every cell's labels rendered and whether the cell is
// a known one (every value from its label's own set).
func (g *grid) each(f func(i int, labels string, known bool)) {
	idx := make([]int, len(g.labels))
	for i := range g.counts {
		var b strings.Builder
		known := true
		for n, k := range g.printed {
			if n > 0 {
				b.WriteByte(',')
			}
			l := g.labels[k]
			b.WriteString(pair(l.name, l.values[idx[k]]))
			known = known && idx[k] < l.known
		}
		f(i, b.String(), known)
		for k := len(idx) - 1; k >= 0; k-- {
			if idx[k]++; idx[k] < len(g.labels[k].values) {
				break
			}
			idx[k] = 0
		}
	}
}

func (g *grid) write(w *bufio.Writer, name string) {
	g.each(func(i int, labels string, known bool) {
		if v := g.counts[i].Load(); known || v > 0 {
			sample(w, name, labels, float64(v))
		}
	})
}

// histograms is a histogram for every value of one label.
type histograms struct {
	rows    grid
	bounds  []float64
	buckets [][]atomic.Uint64 // per row, per bound: observations at most it and above the one before
	sums    []atomic.Uint64   // per row, the sum's float64 bits
}

func newHistograms(l label, bounds []float64) histograms {
	h := histograms{rows: newGrid(l), bounds: bounds, sums: make([]atomic.Uint64, len(l.values))}
	h.buckets = make([][]atomic.Uint64, len(l.values))
	for i := range h.buckets {
		h.buckets[i] = make([]atomic.Uint64, len(bounds))
	}
	return h
}

func (h *histograms) observe(value string, v float64) {
	row := h.rows.cell(value)
	h.rows.counts[row].Add(1)
	if b, _ := slices.BinarySearch(h.bounds, v); b < len(h.bounds) {
		h.buckets[row][b].Add(1)
	}
	for {
		old := h.sums[row].Load()
		if h.sums[row].CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func (h *histograms) write(w *bufio.Writer, name string) {
	h.rows.each(func(row int, labels string, known bool) {
		count := h.rows.counts[row].Load()
		if !known && count == 0 {
			return
		}
		var cum uint64
		for b, bound := range h.bounds {
			cum += h.buckets[row][b].Load()
			sample(w, name+"_bucket", labels+","+pair("le", strconv.FormatFloat(bound, 'g', -1, 64)), float64(cum))
		}
		sample(w, name+"_bucket", labels+","+pair("le", "+Inf"), float64(count))
		sample(w, name+"_sum", labels, math.Float64frombits(h.sums[row].Load()))
		sample(w, name+"_count", labels, float64(count))
	})
}

// family writes a family's HELP and TYPE lines.
func family(w *bufio.Writer, name, kind, help string) {
	w.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + kind + "\n")
}

// sample writes one sample line; labels are already rendered pairs.
func sample(w *bufio.Writer, name, labels string, v float64) {
	w.WriteString(name)
	if labels != "" {
		w.WriteString("{" + labels + "}")
	}
	w.WriteString(" " + strconv.FormatFloat(v, 'g', -1, 64) + "\n")
}

// pair renders name="value" with the value escaped as the format asks:
// backslash, double quote and line feed.
func pair(name, value string) string {
	var b strings.Builder
	b.WriteString(name + `="`)
	for _, r := range value {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
