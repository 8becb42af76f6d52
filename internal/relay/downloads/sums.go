package downloads

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/namechars"
)

// Sum is one line of a SHA256SUMS file: a file's name and its SHA-256.
type Sum struct {
	Name   string
	SHA256 [32]byte
}

// ValidName reports whether name may be served: 1 to
// limits.DownloadNameMaxBytes letters, digits, '.', '_' and '-', not
// starting with '.'. Such a name is one path segment and no directory's
// own name, so it can never reach outside the directory it names a file
// of.
func ValidName(name string) bool {
	return namechars.Valid(name, limits.DownloadNameMaxBytes) && name[0] != '.'
}

// ParseSums reads a SHA256SUMS file as sha256sum writes it: one line per
// file, 64 lowercase hex digits, two spaces (or a space and '*', binary
// mode) and the name, each line ending in a newline. Names are valid and
// unique, there are at most limits.DownloadsMaxFiles lines, and the file
// is at most limits.DownloadsMaxSumsBytes. The sums come back sorted by
// name.
func ParseSums(data []byte) ([]Sum, error) {
	if len(data) > limits.DownloadsMaxSumsBytes {
		return nil, fmt.Errorf("SHA256SUMS is over %d bytes", limits.DownloadsMaxSumsBytes)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		return nil, errors.New("SHA256SUMS does not end with a newline")
	}
	var sums []Sum
	seen := map[string]bool{}
	for n, line := range bytes.SplitAfter(data, []byte("\n")) {
		if len(line) == 0 {
			break
		}
		if len(sums) == limits.DownloadsMaxFiles {
			return nil, fmt.Errorf("SHA256SUMS names more than %d files", limits.DownloadsMaxFiles)
		}
		s, err := parseLine(line[:len(line)-1])
		if err != nil {
			return nil, fmt.Errorf("SHA256SUMS line %d: %w", n+1, err)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("SHA256SUMS line %d: %s is named twice", n+1, s.Name)
		}
		seen[s.Name] = true
		sums = append(sums, s)
	}
	slices.SortFunc(sums, func(a, b Sum) int { return strings.Compare(a.Name, b.Name) })
	return sums, nil
}

func parseLine(line []byte) (Sum, error) {
	const hexLen = 64
	if len(line) < hexLen+3 || (string(line[hexLen:hexLen+2]) != "  " && string(line[hexLen:hexLen+2]) != " *") {
		return Sum{}, errors.New("want 64 hex digits, two spaces and a name")
	}
	var s Sum
	h := line[:hexLen]
	if bytes.ContainsFunc(h, func(r rune) bool { return !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') }) {
		return Sum{}, errors.New("the hash is not 64 lowercase hex digits")
	}
	hex.Decode(s.SHA256[:], h)
	s.Name = string(line[hexLen+2:])
	if !ValidName(s.Name) {
		return Sum{}, fmt.Errorf("a file name is 1 to %d letters, digits, '.', '_' and '-', not starting with '.'", limits.DownloadNameMaxBytes)
	}
	return s, nil
}

// FormatSums writes sums as sha256sum does, in their order.
func FormatSums(sums []Sum) []byte {
	var b bytes.Buffer
	for _, s := range sums {
		b.WriteString(hex.EncodeToString(s.SHA256[:]))
		b.WriteString("  ")
		b.WriteString(s.Name)
		b.WriteByte('\n')
	}
	return b.Bytes()
}
