// Package principal names who acts on managed jobs (README):
// through the relay, the client token's principal, carried in each call's
// grant; on this machine (`commandcore mcp`, the CLI), Local. A job records
// the principal that started it, and a remote principal sees and acts on
// its own jobs only.
package principal

import (
	"strings"

	"github.com/commandcore/commandcore/internal/namechars"
)

// Principal is who a call acts for.
type Principal string

// Local is the machine's owner: `commandcore mcp` and the CLI. It sees
// every job; no remote principal may take its name.
const Local Principal = "local"

// MaxBytes bounds a principal's name.
const MaxBytes = 64

// Valid reports whether name may be a remote principal: 1 to MaxBytes
// letters, digits, '.', '_' and '-', and not Local in any letter case.
func Valid(name string) bool {
	return namechars.Valid(name, MaxBytes) && !strings.EqualFold(name, string(Local))
}

// Sees reports whether p may see and act on a job owned by owner. Local
// sees every job; a remote principal only its own, and never a job
// without an owner (one from before jobs had owners).
func (p Principal) Sees(owner string) bool {
	return p == Local || owner != "" && owner == string(p)
}
