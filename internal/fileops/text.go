package fileops

import (
	"fmt"
	"strings"
)

// The Text methods are each result's text content: a short summary with
// the data itself, so the text does not repeat the structured result in
// full (see toolresult.Texter).

// Text is the range read, then the data (or how much base64 the
// structured result holds).
func (r *ReadResult) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "bytes [%d, %d) of %d, sha256 %s", r.Offset, r.NextOffset, r.Size, hashText(r.SHA256))
	switch {
	case r.EOF:
		b.WriteString(", to the end")
	case r.NextLine > 0:
		fmt.Fprintf(&b, ", next_line %d", r.NextLine)
	default:
		fmt.Fprintf(&b, ", next_offset %d", r.NextOffset)
	}
	if r.Encoding == "base64" {
		b.WriteString(": binary, as base64 in the structured result\n")
		return b.String()
	}
	b.WriteString(":\n" + r.Data)
	return b.String()
}

// Text summarises a write.
func (r *WriteResult) Text() string {
	return fmt.Sprintf("wrote %d bytes; the file has %d, sha256 %s\n", r.BytesWritten, r.Size, hashText(r.SHA256))
}

// hashText is a result's sha256 as its text says it.
func hashText(sum *string) string {
	if sum == nil {
		return "not computed (the file is too large to hash)"
	}
	return *sum
}

// Text summarises an edit, with its diff.
func (r *EditResult) Text() string {
	s := fmt.Sprintf("%d replacements; the file has %d bytes, sha256 %s\n", r.Replacements, r.Size, r.SHA256)
	if r.DiffTruncated {
		s += "(diff truncated)\n"
	}
	return s + r.Diff
}
