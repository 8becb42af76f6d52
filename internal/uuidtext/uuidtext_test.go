package uuidtext_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/uuidtext"
)

const id = "0f8fad5b-d9cb-469f-a165-70867728950e"

var (
	lower   = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	anyCase = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

func TestShapes(t *testing.T) {
	for _, c := range []struct {
		s               string
		canonical, any_ bool
	}{
		{id, true, true},
		{strings.ToUpper(id), false, true},
		{"0f8fad5b-d9cb-469f-a165-70867728950", false, false},
		{"0f8fad5b-d9cb-469f-a165-70867728950ef", false, false},
		{"0f8fad5bd-9cb-469f-a165-70867728950e", false, false},
		{"0f8fad5b-d9cb-469f-a165-70867728950g", false, false},
		{"0f8fad5b-d9cb-469f-a165-70867728950\u0435"[:36], false, false},
		{"", false, false},
	} {
		if got := uuidtext.Canonical(c.s); got != c.canonical {
			t.Errorf("Canonical(%q) = %v", c.s, got)
		}
		if got := uuidtext.AnyCase(c.s); got != c.any_ {
			t.Errorf("AnyCase(%q) = %v", c.s, got)
		}
	}
}

// FuzzShapes holds both loops to their patterns.
func FuzzShapes(f *testing.F) {
	f.Add(id)
	f.Add(strings.ToUpper(id))
	f.Add("0f8fad5b-d9cb-469f-a165-70867728950\u0435")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := uuidtext.Canonical(s), lower.MatchString(s); got != want {
			t.Fatalf("Canonical(%q) = %v, the pattern says %v", s, got, want)
		}
		if got, want := uuidtext.AnyCase(s), anyCase.MatchString(s); got != want {
			t.Fatalf("AnyCase(%q) = %v, the pattern says %v", s, got, want)
		}
	})
}
