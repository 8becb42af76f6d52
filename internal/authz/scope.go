// Scopes: the tool and device lists shared by the relay's client tokens
// and the owner's permission ceiling (README, "The relay and the link"). The grammar is
// deliberately tiny — a whole wildcard, exact names, and "prefix.*" — so
// that a list means the same thing wherever it is read and no glob or regex
// language can widen it by surprise.

package authz

import (
	"strings"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/namechars"
)

// ScopeAll is the entry that matches every name.
const ScopeAll = "*"

// prefixSuffix ends a prefix pattern such as "process.*".
const prefixSuffix = ".*"

// maxEntryBytes bounds one entry so that lists stay small and names stay
// readable in logs and listings.
const maxEntryBytes = 128

// ParseScopes splits a comma-separated list into validated entries, trimming
// whitespace around each. An empty list or entry is an error rather than
// "nothing", so that a typo such as a trailing comma cannot silently change
// what a token or ceiling covers. Messages name the entry's position only,
// never its text.
func ParseScopes(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, errcode.New(errcode.InvalidArgument, "scope list is empty")
	}
	parts := strings.Split(list, ",")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		entry := strings.TrimSpace(p)
		if entry == "" {
			return nil, errcode.New(errcode.InvalidArgument, "scope entry %d is empty", i+1)
		}
		if !ValidScope(entry) {
			return nil, errcode.New(errcode.InvalidArgument, "scope entry %d is not a valid name or pattern", i+1)
		}
		out = append(out, entry)
	}
	return out, nil
}

// ValidScope reports whether entry is "*", a name, or a name followed by ".*".
// Names are 1 to 128 bytes of [A-Za-z0-9._-]; the bound covers the whole
// entry, suffix included.
func ValidScope(entry string) bool {
	if entry == ScopeAll {
		return true
	}
	if len(entry) > maxEntryBytes {
		return false
	}
	return namechars.Valid(strings.TrimSuffix(entry, prefixSuffix), maxEntryBytes)
}

// MatchScope reports whether any pattern covers name: "*" covers everything,
// "p.*" covers names that start with "p.", and any other entry covers
// exactly itself. An invalid pattern covers nothing, so a hand-built list
// fails closed instead of matching by accident.
func MatchScope(patterns []string, name string) bool {
	for _, p := range patterns {
		if !ValidScope(p) {
			continue
		}
		if p == ScopeAll || p == name {
			return true
		}
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}
