package jobstore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
)

// MinIDPrefix is the shortest abbreviation of a job ID that Resolve
// accepts, as git accepts abbreviated commit IDs; activity prints this many.
const MinIDPrefix = 8

// maxCandidates bounds the IDs an ambiguity error lists.
const maxCandidates = 10

// Resolve returns the ID of the one job whose ID is ref or starts with it
// when ref has at least MinIDPrefix characters. A ref that names no job is
// not_found; one that several IDs start with is invalid_argument, listing
// them.
func (s *Store) Resolve(ref string) (string, error) {
	if jobmeta.ValidID(ref) {
		return ref, nil
	}
	ids, err := s.ids()
	if err != nil {
		return "", err
	}
	var matches []string
	if len(ref) >= MinIDPrefix {
		for _, id := range ids {
			if strings.HasPrefix(id, ref) {
				matches = append(matches, id)
			}
		}
	}
	switch len(matches) {
	case 0:
		return "", errcode.New(errcode.NotFound, "no job matches (give a job ID, or a unique prefix of at least %d of its characters)", MinIDPrefix)
	case 1:
		return matches[0], nil
	}
	slices.Sort(matches)
	shown := matches[:min(len(matches), maxCandidates)]
	more := ""
	if len(matches) > len(shown) {
		more = fmt.Sprintf("\n  and %d more", len(matches)-len(shown))
	}
	return "", errcode.New(errcode.InvalidArgument, "the prefix is ambiguous; it matches %d jobs:\n  %s%s",
		len(matches), strings.Join(shown, "\n  "), more)
}
