package fileops

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
)

func mismatchOf(t *testing.T, err error) Mismatch {
	t.Helper()
	var e *errcode.Error
	if !errors.As(err, &e) || e.Code != errcode.EditMismatch {
		t.Fatalf("%v, want edit_mismatch", err)
	}
	m, ok := e.Details.(Mismatch)
	if !ok {
		t.Fatalf("details %T, want Mismatch", e.Details)
	}
	return m
}

func TestEditAppliesEveryEdit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "main.go")
	writeFile(t, path, "package main\n\nfunc a() {}\n\nfunc b() {}\n", 0o644)
	res, err := EditFile(context.Background(), nil, EditRequest{Path: path, ExpectedSHA256: hexSum("package main\n\nfunc a() {}\n\nfunc b() {}\n"), Edits: []Edit{
		{OldText: "func a() {}", NewText: "func a() { return }"},
		{OldText: "() {", NewText: "(x int) {", ExpectedReplacements: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := "package main\n\nfunc a(x int) { return }\n\nfunc b(x int) {}\n"
	if got, _ := os.ReadFile(path); string(got) != want {
		t.Fatalf("file %q, want %q", got, want)
	}
	if res.Replacements != 3 || res.SHA256 != hexSum(want) || res.Size != int64(len(want)) {
		t.Fatalf("result %+v", res)
	}
	wantDiff := "--- " + path + "\n+++ " + path + "\n@@ -1,5 +1,5 @@\n package main\n \n-func a() {}\n+func a(x int) { return }\n \n-func b() {}\n+func b(x int) {}\n"
	if res.Diff != wantDiff || res.DiffTruncated {
		t.Fatalf("diff:\n%s\nwant:\n%s", res.Diff, wantDiff)
	}
}

// TestEditMismatchChangesNothing: too many occurrences, none, or a stale
// hash refuse the whole call and leave the file as it was.
func TestEditMismatchChangesNothing(t *testing.T) {
	const text = "alpha\n\tbeta gamma\ndelta\nbeta gamma\n"
	path := filepath.Join(t.TempDir(), "f")
	writeFile(t, path, text, 0o644)

	_, err := EditFile(context.Background(), nil, EditRequest{Path: path, Edits: []Edit{{OldText: "alpha", NewText: "A"}, {OldText: "beta gamma", NewText: "x"}}})
	m := mismatchOf(t, err)
	if m.Edit != 2 || m.Found != 2 || m.Expected != 1 || len(m.Lines) != 2 || m.Lines[0] != 2 || m.Lines[1] != 4 {
		t.Errorf("two occurrences: %+v", m)
	}
	if !strings.Contains(err.Error(), "edit 2") || !strings.Contains(err.Error(), "2 times") {
		t.Errorf("message %q does not name the edit and the count", err)
	}

	// One character off: the line of the near match.
	_, err = EditFile(context.Background(), nil, EditRequest{Path: path, Edits: []Edit{{OldText: "delta\nbeta gamme\n", NewText: "x"}}})
	if m := mismatchOf(t, err); m.Found != 0 || m.ClosestLine != 3 || m.WhitespaceOnly {
		t.Errorf("near miss: %+v", m)
	}
	_, err = EditFile(context.Background(), nil, EditRequest{Path: path, Edits: []Edit{{OldText: "Xelta\nbeta gamma", NewText: "x"}}})
	if m := mismatchOf(t, err); m.ClosestLine != 3 {
		t.Errorf("near miss at the first character: %+v", m)
	}
	// Indentation off: whitespace only.
	_, err = EditFile(context.Background(), nil, EditRequest{Path: path, Edits: []Edit{{OldText: "alpha\n    beta gamma\n", NewText: "x"}}})
	if m := mismatchOf(t, err); m.ClosestLine != 1 || !m.WhitespaceOnly {
		t.Errorf("indentation: %+v", m)
	}
	_, err = EditFile(context.Background(), nil, EditRequest{Path: path, Edits: []Edit{{OldText: "nothing like it", NewText: "x"}}})
	if m := mismatchOf(t, err); m.ClosestLine != 0 {
		t.Errorf("far off: %+v", m)
	}
	_, err = EditFile(context.Background(), nil, EditRequest{Path: path, ExpectedSHA256: hexSum("other"), Edits: []Edit{{OldText: "alpha", NewText: "x"}}})
	if codeOf(err) != errcode.Conflict {
		t.Errorf("stale hash: %v, want conflict", err)
	}
	if got, _ := os.ReadFile(path); string(got) != text {
		t.Fatalf("a refused edit changed the file: %q", got)
	}
}

func TestEditValidates(t *testing.T) {
	many := make([]Edit, 101)
	for i := range many {
		many[i] = Edit{OldText: "a"}
	}
	for _, r := range []EditRequest{
		{Path: "/f"},
		{Path: "/f", Edits: many},
		{Path: "/f", Edits: []Edit{{OldText: ""}}},
		{Path: "/f", Edits: []Edit{{OldText: "a", ExpectedReplacements: -1}}},
		{Path: "rel", Edits: []Edit{{OldText: "a"}}},
	} {
		if _, err := r.Validate(); codeOf(err) != errcode.InvalidArgument {
			t.Errorf("%d edits: %v, want invalid_argument", len(r.Edits), err)
		}
	}
}

// FuzzApplyEdits: an edit applies exactly when old_text occurs as often
// as expected, and then as every occurrence replaced in turn; a refused
// call reports the edit and count that failed.
func FuzzApplyEdits(f *testing.F) {
	f.Add([]byte("a b a"), "a", "c", 2, "b", "", 0)
	f.Add([]byte("line\nline\n"), "line\n", "x", 1, "x", "y", 1)
	f.Fuzz(func(t *testing.T, content []byte, old1, new1 string, want1 int, old2, new2 string, want2 int) {
		edits := []Edit{{old1, new1, want1}, {old2, new2, want2}}
		if _, err := (&EditRequest{Path: "/f", Edits: edits}).Validate(); err != nil {
			return
		}
		orig := append([]byte(nil), content...)
		got, n, err := Apply(context.Background(), content, edits)
		if !bytes.Equal(content, orig) {
			t.Fatal("Apply changed its input")
		}
		cur, total := orig, 0
		for i, e := range edits {
			found := bytes.Count(cur, []byte(e.OldText))
			if found != max(e.ExpectedReplacements, 1) {
				m := mismatchOf(t, err)
				if m.Edit != i+1 || m.Found != found || got != nil {
					t.Fatalf("mismatch %+v, want edit %d found %d", m, i+1, found)
				}
				return
			}
			cur = bytes.ReplaceAll(cur, []byte(e.OldText), []byte(e.NewText))
			total += found
		}
		if err != nil || !bytes.Equal(got, cur) || n != total {
			t.Fatalf("Apply = %q, %d, %v; want %q, %d", got, n, err, cur, total)
		}
	})
}
