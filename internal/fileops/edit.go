package fileops

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/owndirs"
)

// Edit is one exact replacement of files.edit.
type Edit struct {
	OldText              string `json:"old_text" jsonschema:"the exact text to replace (not empty)"`
	NewText              string `json:"new_text" jsonschema:"what replaces it"`
	ExpectedReplacements int    `json:"expected_replacements,omitempty" jsonschema:"how many times old_text must occur, default 1; every occurrence is replaced"`
}

// EditRequest is the input of files.edit.
type EditRequest struct {
	Path           string `json:"path" jsonschema:"absolute path of the file"`
	Edits          []Edit `json:"edits" jsonschema:"1-100 of {old_text, new_text, expected_replacements}, applied in order, each to the text the previous ones left; all or none"`
	ExpectedSHA256 string `json:"expected_sha256,omitempty" jsonschema:"refuse with conflict unless the file's content has this SHA-256 (hex)"`
}

// EditResult is the output of files.edit.
type EditResult struct {
	Replacements int    `json:"replacements"`
	Size         int64  `json:"size"`
	SHA256       string `json:"sha256"`
	// Diff is a unified diff of the change, at most FileEditDiffMax bytes.
	Diff          string `json:"diff"`
	DiffTruncated bool   `json:"diff_truncated,omitempty"`
}

// Mismatch is the details of an edit_mismatch error.
type Mismatch struct {
	// Edit is the 1-based position of the edit in edits.
	Edit     int `json:"edit"`
	Found    int `json:"found"`
	Expected int `json:"expected"`
	// Lines are the lines where old_text starts (the first few), when it
	// was found at all.
	Lines []int `json:"lines,omitempty"`
	// ClosestLine is where the text nearest to old_text starts, when it was
	// not found; WhitespaceOnly says it differs from old_text only in white
	// space at the ends of lines.
	ClosestLine    int  `json:"closest_line,omitempty"`
	WhitespaceOnly bool `json:"whitespace_only,omitempty"`
	// NearSearchBounded: the search for the nearest text stopped at its
	// bound of line comparisons before it found any.
	NearSearchBounded bool `json:"near_search_bounded,omitempty"`
}

// maxMismatchLines bounds Mismatch.Lines.
const maxMismatchLines = 10

// Validate checks the request without touching the file system and
// returns the normalised expected hash.
func (r *EditRequest) Validate() (string, error) {
	if err := checkPath(r.Path); err != nil {
		return "", err
	}
	if len(r.Edits) == 0 || len(r.Edits) > limits.FileEditMaxEdits {
		return "", invalid("edits must have 1 to %d entries", limits.FileEditMaxEdits)
	}
	for i, e := range r.Edits {
		switch {
		case e.OldText == "":
			return "", invalid("edit %d: old_text must not be empty", i+1)
		case e.ExpectedReplacements < 0:
			return "", invalid("edit %d: expected_replacements must be at least 1", i+1)
		}
	}
	return checkSHA(r.ExpectedSHA256)
}

// EditFile carries out a files.edit: every edit or none, atomically. It
// stops with ctx until the file is replaced.
func EditFile(ctx context.Context, own *owndirs.Set, req EditRequest) (*EditResult, error) {
	want, err := req.Validate()
	if err != nil {
		return nil, err
	}
	t, err := openTarget(own, req.Path, false)
	if err != nil {
		return nil, err
	}
	defer t.close()
	f, st, err := t.openExisting(unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	if st.Size > limits.FileEditMaxBytes {
		f.Close()
		return nil, invalid("the file is larger than the %d bytes files.edit holds; use files.write", limits.FileEditMaxBytes)
	}
	old, err := io.ReadAll(io.LimitReader(f, limits.FileEditMaxBytes+1))
	f.Close()
	if err != nil {
		return nil, fsError(err, "read")
	}
	if len(old) > limits.FileEditMaxBytes {
		return nil, invalid("the file is larger than the %d bytes files.edit holds; use files.write", limits.FileEditMaxBytes)
	}
	if want != "" && sum(old) != want {
		return nil, ErrConflict
	}
	updated, n, err := Apply(ctx, old, req.Edits)
	if err != nil {
		return nil, err
	}
	like, err := t.openLike(st)
	if err != nil {
		return nil, err
	}
	defer like.Close()
	if err := writeAtomic(t, updated, atomicfile.Options{Like: like}); err != nil {
		return nil, err
	}
	diff, truncated := Diff(req.Path, old, updated, limits.FileEditDiffMax)
	return &EditResult{Replacements: n, Size: int64(len(updated)), SHA256: sum(updated), Diff: diff, DiffTruncated: truncated}, nil
}

// Apply applies edits in order to content, each to what the previous ones
// left, and returns the result and the number of replacements. When an
// old_text does not occur exactly expected_replacements times, it returns
// an edit_mismatch error with Mismatch details and content is unchanged.
// It returns ctx's error once ctx ends.
func Apply(ctx context.Context, content []byte, edits []Edit) ([]byte, int, error) {
	total := 0
	for i, e := range edits {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		want := max(e.ExpectedReplacements, 1)
		old := []byte(e.OldText)
		found := bytes.Count(content, old)
		if found != want {
			return nil, 0, mismatch(ctx, content, i+1, e.OldText, found, want)
		}
		if grown := len(content) + found*(len(e.NewText)-len(old)); grown > limits.FileEditMaxBytes {
			return nil, 0, invalid("edit %d: the file would grow past the %d bytes files.edit holds", i+1, limits.FileEditMaxBytes)
		}
		content = bytes.ReplaceAll(content, old, []byte(e.NewText))
		total += found
	}
	return content, total, nil
}

// mismatch describes edit n, whose old_text occurs found times in content.
func mismatch(ctx context.Context, content []byte, n int, old string, found, want int) error {
	d := Mismatch{Edit: n, Found: found, Expected: want}
	var msg string
	if found > 0 {
		d.Lines = occurrenceLines(content, []byte(old), maxMismatchLines)
		msg = fmt.Sprintf("edit %d: old_text occurs %d times, expected %d (lines %s); make it longer to be unique, or set expected_replacements",
			n, found, want, joinInts(d.Lines))
	} else {
		var err error
		d.ClosestLine, d.WhitespaceOnly, d.NearSearchBounded, err = closest(ctx, content, old)
		if err != nil {
			return err
		}
		switch {
		case d.WhitespaceOnly:
			msg = fmt.Sprintf("edit %d: old_text not found; line %d matches it but for white space at the ends of lines", n, d.ClosestLine)
		case d.ClosestLine > 0:
			msg = fmt.Sprintf("edit %d: old_text not found; the closest text starts at line %d", n, d.ClosestLine)
		case d.NearSearchBounded:
			msg = fmt.Sprintf("edit %d: old_text not found, nor anything close to it within the %d line comparisons the search may spend", n, limits.FileEditNearMatchSteps)
		default:
			msg = fmt.Sprintf("edit %d: old_text not found, nor anything close to it", n)
		}
	}
	return errcode.New(errcode.EditMismatch, "%s; nothing was changed", msg).WithDetails(d)
}

// lineAt is the 1-based line of byte offset pos in content.
func lineAt(content []byte, pos int) int {
	return bytes.Count(content[:pos], []byte{'\n'}) + 1
}

func occurrenceLines(content, old []byte, limit int) []int {
	var out []int
	line, last := 1, 0
	for off := 0; len(out) < limit; {
		i := bytes.Index(content[off:], old)
		if i < 0 {
			break
		}
		line += bytes.Count(content[last:off+i], []byte{'\n'})
		last = off + i
		out = append(out, line)
		off += i + len(old)
	}
	return out
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// closest returns the line where the text nearest to old starts, 0 when
// nothing is near. First the lines of old compared without white space at
// their ends (a model's most common slip, indentation); else the longest
// prefix or suffix of old that occurs, when it is at least half of old
// (one wrong character anywhere leaves one of them that long).
//
// The prefix and suffix searches are linear in content, a logarithmic
// number of times; the line comparison, which is not, stops after
// FileEditNearMatchSteps comparisons (bounded) and with ctx.
func closest(ctx context.Context, content []byte, old string) (line int, whitespaceOnly, bounded bool, err error) {
	l, bounded, err := trimmedMatch(ctx, content, old, limits.FileEditNearMatchSteps)
	if err != nil || l > 0 {
		return l, l > 0, false, err
	}
	pre := longest(len(old), func(n int) bool { return bytes.Contains(content, []byte(old[:n])) })
	if err := ctx.Err(); err != nil {
		return 0, false, false, err
	}
	suf := longest(len(old), func(n int) bool { return bytes.Contains(content, []byte(old[len(old)-n:])) })
	if err := ctx.Err(); err != nil {
		return 0, false, false, err
	}
	if 2*max(pre, suf) < len(old)-1 || max(pre, suf) == 0 {
		return 0, false, bounded, nil
	}
	if pre >= suf {
		return lineAt(content, bytes.Index(content, []byte(old[:pre]))), false, false, nil
	}
	i := bytes.Index(content, []byte(old[len(old)-suf:]))
	// The suffix's line, less the lines of old before it.
	return max(lineAt(content, i)-strings.Count(old[:len(old)-suf], "\n"), 1), false, false, nil
}

// longest is the largest n in [0, limit) with ok(n), for ok that holds up
// to some n and no further.
func longest(limit int, ok func(int) bool) int {
	lo, hi := 0, limit-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// trimmedMatch is the first line from which content's lines equal old's,
// each compared without white space at its ends; 0 when there is none or
// old has no text but white space. It gives up (bounded) after steps line
// comparisons, and returns ctx's error once ctx ends.
func trimmedMatch(ctx context.Context, content []byte, old string, steps int) (line int, bounded bool, err error) {
	want := strings.Split(strings.TrimSuffix(old, "\n"), "\n")
	for i := range want {
		want[i] = strings.TrimSpace(want[i])
	}
	if strings.Join(want, "") == "" {
		return 0, false, nil
	}
	// Lines are walked in place, not split: a file of newlines would
	// otherwise cost a slice header per byte.
	for start, n := 0, 1; start <= len(content); n++ {
		if n%ctxCheckLines == 0 {
			if err := ctx.Err(); err != nil {
				return 0, false, err
			}
		}
		pos, j := start, 0
		for j < len(want) && pos <= len(content) {
			if steps--; steps < 0 {
				return 0, true, nil
			}
			line, next := lineFrom(content, pos)
			if string(bytes.TrimSpace(line)) != want[j] {
				break
			}
			j, pos = j+1, next
		}
		if j == len(want) {
			return n, false, nil
		}
		_, start = lineFrom(content, start)
	}
	return 0, false, nil
}

// lineFrom returns the line of content that starts at pos (without its
// newline) and where the next one starts: past the end, len(content)+1,
// when it is the last.
func lineFrom(content []byte, pos int) ([]byte, int) {
	i := bytes.IndexByte(content[pos:], '\n')
	if i < 0 {
		return content[pos:], len(content) + 1
	}
	return content[pos : pos+i], pos + i + 1
}

// ctxCheckLines is how many start lines trimmedMatch tries between looks
// at its context.
const ctxCheckLines = 4096
