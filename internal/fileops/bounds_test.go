package fileops

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// sparse makes a file of exactly size bytes that begins with head.
func sparse(t *testing.T, head string, size int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sparse")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(head); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEditHoldsExactlyItsBound: a file of exactly FileEditMaxBytes is
// edited whole (nothing of it lost), one byte more is refused, and an
// edit may grow a file to the bound but not past it.
func TestEditHoldsExactlyItsBound(t *testing.T) {
	ctx := context.Background()
	path := sparse(t, "needle\n", limits.FileEditMaxBytes)
	res, err := EditFile(ctx, nil, EditRequest{Path: path, Edits: []Edit{{OldText: "needle", NewText: "pin"}}})
	if err != nil {
		t.Fatalf("a file of exactly the bound: %v", err)
	}
	if fi, _ := os.Stat(path); res.Size != limits.FileEditMaxBytes-3 || fi.Size() != limits.FileEditMaxBytes-3 {
		t.Errorf("edited size %d, on disk %d, want %d", res.Size, fi.Size(), limits.FileEditMaxBytes-3)
	}
	over := sparse(t, "needle\n", limits.FileEditMaxBytes+1)
	if _, err := EditFile(ctx, nil, EditRequest{Path: over, Edits: []Edit{{OldText: "needle", NewText: "pin"}}}); codeOf(err) != errcode.InvalidArgument {
		t.Errorf("one byte over: %v", err)
	}
	content := []byte("ab" + strings.Repeat("\x00", limits.FileEditMaxBytes-4))
	if got, _, err := Apply(ctx, content, []Edit{{OldText: "ab", NewText: "abcd"}}); err != nil || len(got) != limits.FileEditMaxBytes {
		t.Errorf("growing to the bound: %d bytes, %v", len(got), err)
	}
	if _, _, err := Apply(ctx, content, []Edit{{OldText: "ab", NewText: "abcde"}}); codeOf(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "edit 1:") {
		t.Errorf("growing past the bound: %v", err)
	}
}

// TestEditValidatesItsBounds: as many edits as the bound are taken, and an
// error names the edit at fault by its place.
func TestEditValidatesItsBounds(t *testing.T) {
	most := make([]Edit, limits.FileEditMaxEdits)
	for i := range most {
		most[i] = Edit{OldText: "a"}
	}
	if _, err := (&EditRequest{Path: "/f", Edits: most}).Validate(); err != nil {
		t.Errorf("%d edits: %v", len(most), err)
	}
	for _, c := range []struct {
		edits []Edit
		want  string
	}{
		{[]Edit{{OldText: "a"}, {OldText: ""}}, "edit 2: old_text"},
		{[]Edit{{OldText: "a"}, {OldText: "b"}, {OldText: "c", ExpectedReplacements: -1}}, "edit 3: expected_replacements"},
	} {
		if _, err := (&EditRequest{Path: "/f", Edits: c.edits}).Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.edits, err, c.want)
		}
	}
	for _, s := range []string{strings.Repeat("a", 64) + "zz", strings.Repeat("a", 65), strings.Repeat("a", 62)} {
		if _, err := checkSHA(s); codeOf(err) != errcode.InvalidArgument {
			t.Errorf("expected_sha256 %q: %v", s, err)
		}
	}
	if got, err := checkSHA(strings.Repeat("A", 64)); err != nil || got != strings.Repeat("a", 64) {
		t.Errorf("upper case: %q %v", got, err)
	}
}

// TestMismatchNamesTheLines: found too often, the error names the first
// lines where old_text starts (at most ten), the first at the very start.
func TestMismatchNamesTheLines(t *testing.T) {
	ctx := context.Background()
	_, _, err := Apply(ctx, []byte("ab\nab\nx\nab"), []Edit{{OldText: "ab"}})
	if m := mismatchOf(t, err); m.Found != 3 || !equalInts(m.Lines, []int{1, 2, 4}) {
		t.Errorf("mismatch %+v, want lines 1 2 4", m)
	}
	_, _, err = Apply(ctx, []byte(strings.Repeat("q\n", 12)), []Edit{{OldText: "q"}})
	if m := mismatchOf(t, err); m.Found != 12 || len(m.Lines) != maxMismatchLines || m.Lines[9] != 10 {
		t.Errorf("mismatch %+v, want the first %d lines", m, maxMismatchLines)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestClosestAtItsThresholds: the nearest text is named when a prefix or
// suffix of at least half of old_text occurs, not when less does; a tie
// names the prefix's line, and a suffix's line is where old_text would
// start.
func TestClosestAtItsThresholds(t *testing.T) {
	ctx := context.Background()
	content := []byte("first\nabcXXXX\nmiddle\nwxyz\nalpha\nbeta\ngamma\ndelta\n")
	for _, c := range []struct {
		old  string
		line int
	}{
		{"abcdefg", 2},             // a prefix of 3 of 7: 2*3 >= 7-1
		{"abQQQQQ", 0},             // 2 of 7 is too little
		{"abcQwxyz", 4},            // prefix and suffix of 3 and 4: the suffix wins
		{"abcQwxy", 2},             // a tie of 3 and 3: the prefix's line
		{"QQQQQ\ngamma\ndelta", 6}, // the suffix starts with line 6's newline: old_text replaces "beta"
	} {
		line, ws, _, err := closest(ctx, content, c.old)
		if err != nil || ws || line != c.line {
			t.Errorf("closest(%q) = line %d (white space %v, %v), want %d", c.old, line, ws, err, c.line)
		}
	}
}

// TestTrimmedMatchWalksLinesInPlace: empty lines, a last line without a
// newline and the empty line after a final newline are lines like any.
func TestTrimmedMatchWalksLinesInPlace(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		content, old string
		line         int
	}{
		{"a\n\nb", "\nb", 2},
		{"a\nb\n", "b\n\n", 2},
		{"x\ny", "q", 0},
		{"", "q", 0},
	} {
		line, bounded, err := trimmedMatch(ctx, []byte(c.content), c.old, 1000)
		if line != c.line || bounded || err != nil {
			t.Errorf("trimmedMatch(%q, %q) = %d (bounded %v, %v), want %d", c.content, c.old, line, bounded, err, c.line)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := trimmedMatch(cancelled, []byte(strings.Repeat("a\n", 2*ctxCheckLines)), "b", limits.FileEditNearMatchSteps); err == nil {
		t.Error("a cancelled line comparison goes on to the end")
	}
}

// TestListDepthAndExclusions: depth bounds the levels listed exactly, and
// exclude_dirs takes no name that is not a base name.
func TestListDepthAndExclusions(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "1", "2", "3", "f"), "x", 0o644)
	r, err := List(context.Background(), nil, ListRequest{Path: root, Depth: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Entries) != 2 || r.Entries[1].Path != filepath.Join(root, "1", "2") {
		t.Errorf("depth 2 lists %+v", r.Entries)
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a\x00"} {
		if err := (&ListRequest{Path: root, ExcludeDirs: []string{bad}}).Validate(); codeOf(err) != errcode.InvalidArgument {
			t.Errorf("exclude_dirs %q: %v", bad, err)
		}
	}
}

// TestReadOfAFileAtTheHashBound: a file of exactly FileHashMaxBytes is
// hashed whole, also when the window starts past its beginning.
func TestReadOfAFileAtTheHashBound(t *testing.T) {
	path := sparse(t, "head\n", limits.FileHashMaxBytes)
	whole, err := Read(context.Background(), nil, ReadRequest{Path: path, MaxBytes: 5})
	if err != nil || whole.SHA256 == nil || whole.SHA256Skipped != "" {
		t.Fatalf("at the bound: %+v %v", whole, err)
	}
	r, err := Read(context.Background(), nil, ReadRequest{Path: path, Offset: 10, MaxBytes: 5})
	if err != nil || deref(r.SHA256) != *whole.SHA256 || r.Offset != 10 {
		t.Errorf("from offset 10: %+v %v, want the whole file's hash", r, err)
	}
}

// TestReadWindowOfAChangingFile: a file that grew past the hash bound
// while read is not hashed; the size is what was read, or, for a window
// past the end, what fstat said.
func TestReadWindowOfAChangingFile(t *testing.T) {
	content := []byte(strings.Repeat("z", 100))
	r, err := readWindow(&chunkReader{content, 7}, ReadRequest{MaxBytes: 200}, 10, 0, 50)
	if err != nil || r.SHA256 != nil || r.SHA256Skipped == "" || r.Size != 100 {
		t.Errorf("grown past the bound: %+v %v", r, err)
	}
	r, err = readWindow(&chunkReader{content[5:], 7}, ReadRequest{Offset: 5, MaxBytes: 200}, 80, 5, 50)
	if err != nil || r.Size != 100 || len(r.Data) != 95 {
		t.Errorf("from 5, grown: size %d data %d, %v", r.Size, len(r.Data), err)
	}
	r, err = readWindow(&chunkReader{nil, 7}, ReadRequest{MaxBytes: 200}, 0, 0, 50)
	if err != nil || r.Size != 0 || !r.EOF {
		t.Errorf("empty: %+v %v", r, err)
	}
	r, err = readWindow(&chunkReader{nil, 7}, ReadRequest{MaxBytes: 200}, 10, 0, 50)
	if err != nil || r.Size != 0 {
		t.Errorf("shrunk to nothing from 0: size %d, %v; want what was read", r.Size, err)
	}
	// The start line may begin exactly at the bound, not a byte past it.
	at := []byte(strings.Repeat("a", 9) + "\nstart\n" + strings.Repeat("b", 100))
	if r, err := readWindow(&chunkReader{at, 4}, ReadRequest{StartLine: 2, LineCount: 1}, int64(len(at)), 0, 10); err != nil || r.Data != "start\n" {
		t.Errorf("start line at the bound: %+v %v", r, err)
	}
	past := []byte(strings.Repeat("a", 10) + "\nstart\n" + strings.Repeat("b", 100))
	if _, err := readWindow(&chunkReader{past, 4}, ReadRequest{StartLine: 2, LineCount: 1}, int64(len(past)), 0, 10); err != errLineTooFar {
		t.Errorf("start line past the bound: %v", err)
	}
}

// TestReadOfAFileReplacedMeanwhile: reads of a file that another writer
// keeps replacing (by rename, as an atomic save does) find one of its
// versions every time, never a conflict.
func TestReadOfAFileReplacedMeanwhile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	writeFile(t, path, "v", 0o644)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		tmp := filepath.Join(dir, "tmp")
		for !stop.Load() {
			os.WriteFile(tmp, []byte("v"), 0o644)
			os.Rename(tmp, path)
		}
	})
	defer func() { stop.Store(true); wg.Wait() }()
	for range 3000 {
		r, err := Read(context.Background(), nil, ReadRequest{Path: path})
		if err != nil {
			if codeOf(err) == errcode.Conflict {
				t.Fatalf("a read answered conflict while the file was replaced: %v", err)
			}
			continue // between the writer's rename and its next file
		}
		if r.Data != "v" {
			t.Fatalf("read %q", r.Data)
		}
	}
}
