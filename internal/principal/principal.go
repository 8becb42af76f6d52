// Package principal names who acts on managed jobs (README):
// through the relay, the client token's principal, carried in each call's
// grant; on this machine (`commandcore mcp`, the CLI), Local. A job records
// the principal that started it, and a remote principal sees and acts on
// its own jobs only; an admin of the relay's web panel sees every job.
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

// AdminPrefix begins the principal of a person acting from the relay's web
// panel. Valid refuses ':', so no client token can take such a name.
const AdminPrefix = "admin:"

// Valid reports whether name may be a remote principal: 1 to MaxBytes
// letters, digits, '.', '_' and '-', and not Local in any letter case.
func Valid(name string) bool {
	return namechars.Valid(name, MaxBytes) && !strings.EqualFold(name, string(Local))
}

// Admin returns the principal of the panel's user name; IsAdmin tells
// whether the name was a valid one.
func Admin(name string) Principal { return Principal(AdminPrefix + name) }

// IsAdmin reports whether p is a valid admin principal: AdminPrefix, then
// a name of the characters Valid allows, MaxBytes in all.
func (p Principal) IsAdmin() bool {
	name, ok := strings.CutPrefix(string(p), AdminPrefix)
	return ok && namechars.Valid(name, MaxBytes-len(AdminPrefix))
}

// Sees reports whether p may see and act on a job owned by owner. Local
// and an admin see every job (what an admin may do to it, the gate
// decides); a remote principal only its own, and never a job without an
// owner (one from before jobs had owners).
func (p Principal) Sees(owner string) bool {
	return p == Local || p.IsAdmin() || owner != "" && owner == string(p)
}
