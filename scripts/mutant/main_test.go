package main

import (
	"strings"
	"testing"
)

const sample = `package p

func f(a, b int, ok bool) int {
	for a < b && ok {
		a++
		b -= 2
		if a == -b {
			break
		}
	}
	return a * b
}
`

func TestMutateReplacesTheOperatorAtThePosition(t *testing.T) {
	for _, tc := range []struct {
		kind      string
		line, col int
		old, new  string
	}{
		{"CONDITIONALS_BOUNDARY", 4, 8, "for a < b && ok {", "for a <= b && ok {"},
		{"CONDITIONALS_NEGATION", 4, 8, "for a < b && ok {", "for a >= b && ok {"},
		{"INVERT_LOGICAL", 4, 12, "for a < b && ok {", "for a < b || ok {"},
		{"INCREMENT_DECREMENT", 5, 4, "a++", "a--"},
		{"INVERT_ASSIGNMENTS", 6, 5, "b -= 2", "b += 2"},
		{"REMOVE_SELF_ASSIGNMENTS", 6, 5, "b -= 2", "b = 2"},
		{"CONDITIONALS_NEGATION", 7, 8, "if a == -b {", "if a != -b {"},
		{"INVERT_NEGATIVES", 7, 11, "if a == -b {", "if a == +b {"},
		{"INVERT_LOOPCTRL", 8, 4, "break", "continue"},
		{"ARITHMETIC_BASE", 11, 11, "return a * b", "return a / b"},
		// gremlins maps the token, whichever node holds it.
		{"ARITHMETIC_BASE", 7, 11, "if a == -b {", "if a == +b {"},
	} {
		out, err := mutate([]byte(sample), tc.kind, tc.line, tc.col)
		if err != nil {
			t.Errorf("%s at %d:%d: %v", tc.kind, tc.line, tc.col, err)
			continue
		}
		want := strings.Replace(sample, tc.old, tc.new, 1)
		if string(out) != want {
			t.Errorf("%s at %d:%d:\n%s\nwant\n%s", tc.kind, tc.line, tc.col, out, want)
		}
	}
}

func TestMutateRefusesWhatGremlinsWouldNotMutate(t *testing.T) {
	for _, tc := range []struct {
		kind      string
		line, col int
	}{
		{"INVERT_LOGICAL", 4, 8},         // < is not a logical operator
		{"CONDITIONALS_BOUNDARY", 4, 7},  // a space, not the operator
		{"NO_SUCH_MUTATOR", 4, 8},        // not one of gremlins' kinds
		{"CONDITIONALS_BOUNDARY", 99, 1}, // past the end
	} {
		if _, err := mutate([]byte(sample), tc.kind, tc.line, tc.col); err == nil {
			t.Errorf("%s at %d:%d: mutated, want an error", tc.kind, tc.line, tc.col)
		}
	}
}
