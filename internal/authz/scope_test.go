package authz

import (
	"slices"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
)

func TestParseValid(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"*", []string{"*"}},
		{"process.*", []string{"process.*"}},
		{" process.* , system.metrics ,files.search", []string{"process.*", "system.metrics", "files.search"}},
		{"my-laptop,build_box.2", []string{"my-laptop", "build_box.2"}},
		// Every end of every range of [A-Za-z0-9._-].
		{"a,z,A,Z,0,9,.,_,-", []string{"a", "z", "A", "Z", "0", "9", ".", "_", "-"}},
		{"zone0.*,Zulu9,az-AZ_09", []string{"zone0.*", "Zulu9", "az-AZ_09"}},
		{strings.Repeat("a", 128), []string{strings.Repeat("a", 128)}},
		{strings.Repeat("a", 126) + ".*", []string{strings.Repeat("a", 126) + ".*"}},
	}
	for _, c := range cases {
		got, err := ParseScopes(c.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Parse(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParseRejects(t *testing.T) {
	cases := []string{
		"", "   ", ",", "a,", ",a", "a,,b", "a, ,b",
		"proc*", "*.metrics", ".*", "*.*", "**", "a.*.*", "a.**", "a b", "a/b", "a\x00",
		"ä", "a:b", "a,*x",
		// The bytes just outside each range.
		"a`", "a{", "A@", "A[", "0/", "9:", "a+b", "a,b\x7f", "\xff",
		strings.Repeat("a", 129),
		strings.Repeat("a", 127) + ".*",
	}
	for _, in := range cases {
		got, err := ParseScopes(in)
		if err == nil {
			t.Errorf("Parse(%q) = %q, want an error", in, got)
			continue
		}
		if !errcode.Is(err, errcode.InvalidArgument) {
			t.Errorf("Parse(%q): code of %v, want invalid_argument", in, err)
		}
	}
}

// The message leaves the machine and must not quote the entry.
func TestParseMessageIsContentFree(t *testing.T) {
	_, err := ParseScopes("ok, secret-ish/value")
	if err == nil {
		t.Fatal("want an error")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("message echoes the entry: %v", err)
	}
	if !strings.Contains(err.Error(), "entry 2") {
		t.Fatalf("message should name the position: %v", err)
	}
	_, err = ParseScopes("process.*,,system.metrics")
	if err == nil || err.Error() != "invalid_argument: scope entry 2 is empty" {
		t.Fatalf("an empty second entry: %v", err)
	}
}

func TestMatch(t *testing.T) {
	cases := []struct {
		patterns []string
		name     string
		want     bool
	}{
		{[]string{"*"}, "process.start", true},
		{[]string{"*"}, "anything-at-all", true},
		{[]string{"process.*"}, "process.start", true},
		{[]string{"process.*"}, "process.", true},
		{[]string{"process.*"}, "process", false},
		{[]string{"process.*"}, "processes.start", false},
		{[]string{"process.*"}, "system.metrics", false},
		{[]string{"system.metrics"}, "system.metrics", true},
		{[]string{"system.metrics"}, "system.metricsx", false},
		{[]string{"system.metrics"}, "system", false},
		{[]string{"a", "system.*"}, "system.metrics", true},
		{nil, "system.metrics", false},
		{[]string{}, "", false},
		// Invalid patterns cover nothing, not even their own text.
		{[]string{"proc*"}, "proc*", false},
		{[]string{"proc*"}, "process.start", false},
		{[]string{""}, "", false},
		{[]string{"*.*"}, "a.b", false},
		// An invalid entry is skipped, not the end of the list.
		{[]string{"proc*", "process.*"}, "process.start", true},
		{[]string{"", "system.metrics"}, "system.metrics", true},
	}
	for _, c := range cases {
		if got := MatchScope(c.patterns, c.name); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.patterns, c.name, got, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"*", "process.*", " process.* , system.metrics", "a,,b", ".*", "a.*.*",
		strings.Repeat("a", 128), strings.Repeat("a", 127) + ".*", "\t*\n", "x,\u00a0y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		got, err := ParseScopes(list)
		if err != nil {
			if got != nil {
				t.Fatalf("Parse returned entries with an error: %q", got)
			}
			return
		}
		if len(got) == 0 {
			t.Fatal("Parse accepted a list with no entries")
		}
		for _, e := range got {
			if !ValidScope(e) {
				t.Fatalf("accepted invalid entry %q", e)
			}
		}
		again, err := ParseScopes(strings.Join(got, ","))
		if err != nil {
			t.Fatalf("re-parse of %q: %v", got, err)
		}
		if !slices.Equal(again, got) {
			t.Fatalf("re-parse gave %q, want %q", again, got)
		}
	})
}
