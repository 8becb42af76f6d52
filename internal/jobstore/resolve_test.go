package jobstore_test

import (
	"os"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/procid"
)

func TestResolvePrefixes(t *testing.T) {
	f := newFixture(t)
	// Two jobs share their first 12 characters; a third stands apart.
	a, b := "e0ef0e52-1111-4000-8000-000000000001", "e0ef0e52-1111-4000-8000-000000000002"
	f.terminal(a, f.base, f.base, false)
	f.terminal(b, f.base, f.base, false)
	f.terminal(lettered, f.base, f.base, false)

	for ref, want := range map[string]string{
		lettered:                    lettered,
		lettered[:8]:                lettered, // the 8 characters activity prints
		lettered[:20]:               lettered,
		"e0ef0e52-1111-4000-8000-0": "",
		a[:len(a)-1]:                "",
		a:                           a,
	} {
		got, err := f.st.Resolve(ref)
		if want == "" {
			if errcode.From(err).Code != errcode.InvalidArgument || !strings.Contains(err.Error(), "ambiguous") ||
				!strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
				t.Errorf("Resolve(%q) = %q, %v; want the candidates %s and %s", ref, got, err, a, b)
			}
			continue
		}
		if got != want || err != nil {
			t.Errorf("Resolve(%q) = %q, %v; want %s", ref, got, err, want)
		}
	}
	// Fewer than 8 characters never match, even uniquely; nor does
	// anything that is not the start of an ID.
	for _, ref := range []string{lettered[:7], "0f8f", "nope", "", "../x", "0F8FAD5B", lettered[1:9]} {
		got, err := f.st.Resolve(ref)
		if errcode.From(err).Code != errcode.NotFound || !strings.Contains(err.Error(), "no job matches") {
			t.Errorf("Resolve(%q) = %q, %v; want no job matches", ref, got, err)
		}
	}
}

func TestOpenExistingCreatesNothing(t *testing.T) {
	state := t.TempDir()
	st := jobstore.OpenExisting(state, procid.Default())
	recs, err := st.List()
	if err != nil || len(recs) != 0 {
		t.Fatalf("a state directory without jobs: %v, %v", recs, err)
	}
	if _, err := st.Resolve("00000000"); errcode.From(err).Code != errcode.NotFound {
		t.Fatalf("resolving without jobs: %v", err)
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Fatalf("the store created %d entries", len(entries))
	}
}

// TestResolveListsAtMostTenCandidates: an ambiguous prefix lists every
// job it matches up to ten, in order; past ten it lists the first ten and
// says how many more there are.
func TestResolveListsAtMostTenCandidates(t *testing.T) {
	f := newFixture(t)
	for n := 1; n <= 10; n++ {
		f.terminal(id(n), f.base, f.base, false)
	}
	_, err := f.st.Resolve(id(1)[:8])
	want := "the prefix is ambiguous; it matches 10 jobs:"
	for n := 1; n <= 10; n++ {
		want += "\n  " + id(n)
	}
	if errcode.From(err).Code != errcode.InvalidArgument || errcode.From(err).Message != want {
		t.Fatalf("ten candidates: %v\nwant %s", err, want)
	}
	f.terminal(id(11), f.base, f.base, false)
	_, err = f.st.Resolve(id(1)[:8])
	want = strings.Replace(want, "10 jobs", "11 jobs", 1) + "\n  and 1 more"
	if errcode.From(err).Code != errcode.InvalidArgument || errcode.From(err).Message != want || strings.Contains(err.Error(), id(11)) {
		t.Fatalf("eleven candidates: %v\nwant %s", err, want)
	}
}
