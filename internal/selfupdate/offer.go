// Package selfupdate replaces the agent's binary with the one its relay
// offers, and undoes that when the new agent does not link: it fetches
// the binary over the agent's own relay URL, verifies its SHA-256 against
// the offer, renames it over the installed binary atomically (keeping the
// one it replaces beside it), and leaves the restart to a watchdog unit
// running the previous binary, which puts that binary back when the new
// agent has not linked in time.
package selfupdate

import (
	"encoding/hex"
	"errors"
	"strconv"
	"strings"

	"github.com/commandcore/commandcore/internal/namechars"
)

// Offer is a binary a relay serves for the agent's architecture: its
// version, its SHA-256 and its name under the relay's /download/.
type Offer struct {
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	Name    string `json:"name"`
}

// maxVersionBytes bounds an offered version, as the relay bounds the
// version an agent reports.
const maxVersionBytes = 64

// maxNameBytes bounds an offered file name, as the relay bounds the names
// it serves.
const maxNameBytes = 128

// Valid reports whether o can be acted on: a version of printable ASCII
// without spaces, 64 lowercase hex digits, and a download name of letters,
// digits, '.', '_' and '-' not starting with '.'.
func (o Offer) Valid() bool {
	if o.Version == "" || len(o.Version) > maxVersionBytes || strings.ContainsFunc(o.Version, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return false
	}
	if len(o.SHA256) != 64 || strings.ContainsFunc(o.SHA256, func(r rune) bool { return !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') }) {
		return false
	}
	return namechars.Valid(o.Name, maxNameBytes) && o.Name[0] != '.'
}

// sum is o's SHA-256 as bytes.
func (o Offer) sum() ([]byte, error) {
	b, err := hex.DecodeString(o.SHA256)
	if err != nil || len(b) != 32 {
		return nil, errors.New("the offer's SHA-256 is not 64 hex digits")
	}
	return b, nil
}

// Compare orders two versions: X.Y.Z with an optional leading v (and any
// -suffix ignored) by their numbers; a version that is not of that form
// ("dev", an unstamped build) is older than any that is, and equal to
// another such. It returns -1, 0 or 1.
func Compare(a, b string) int {
	pa, oka := parse(a)
	pb, okb := parse(b)
	switch {
	case !oka && !okb:
		return 0
	case !oka:
		return -1
	case !okb:
		return 1
	}
	for i := range pa {
		if pa[i] != pb[i] {
			if pa[i] < pb[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// IsDowngrade reports whether going from version from to version to goes
// back: to is older, or neither is a release and they differ.
func IsDowngrade(from, to string) bool {
	if from == to {
		return false
	}
	_, okf := parse(from)
	_, okt := parse(to)
	if !okf && !okt {
		return true
	}
	return Compare(to, from) < 0
}

func parse(v string) ([3]uint64, bool) {
	var out [3]uint64
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexByte(v, '-'); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil || p == "" || p[0] == '+' {
			return out, false
		}
		out[i] = n
	}
	return out, true
}
