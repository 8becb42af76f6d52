package signin

import (
	"fmt"
	"strings"

	"github.com/commandcore/commandcore/internal/namechars"
	"github.com/commandcore/commandcore/internal/principal"
)

// Rules say who the team's identity provider may sign in: a person whose
// verified e-mail address is listed, or is at a listed domain, or who is
// in a listed group (the ID token's groups claim). An empty list lets no
// one in.
type Rules struct {
	emails, domains, groups map[string]bool
}

const (
	// maxRules bounds the rules --oidc-allow may list.
	maxRules = 256
	// maxRuleBytes bounds one rule.
	maxRuleBytes = 256
	// groupPrefix marks a group rule.
	groupPrefix = "group:"
	// adminAt joins an e-mail's local part and domain in its admin's name:
	// '@' may not be in a principal, and no domain holds '_', so the last
	// adminAt splits a name back into the address it came from.
	adminAt = "_at_"
)

// ParseRules reads --oidc-allow: comma-separated rules, each an e-mail
// address (alice@example.com), a domain (@example.com) or a group
// (group:admins). E-mail addresses and domains match in any letter case;
// groups exactly. A malformed rule is an error that names it.
func ParseRules(s string) (Rules, error) {
	r := Rules{emails: map[string]bool{}, domains: map[string]bool{}, groups: map[string]bool{}}
	parts := strings.Split(s, ",")
	if len(parts) > maxRules {
		return Rules{}, fmt.Errorf("at most %d rules", maxRules)
	}
	for i, raw := range parts {
		rule := strings.TrimSpace(raw)
		if rule == "" || len(rule) > maxRuleBytes {
			return Rules{}, fmt.Errorf("rule %d is empty or longer than %d bytes", i+1, maxRuleBytes)
		}
		switch {
		case strings.HasPrefix(rule, groupPrefix):
			g := rule[len(groupPrefix):]
			if !namechars.Printable(g, maxRuleBytes) || g == "" || strings.TrimSpace(g) != g {
				return Rules{}, fmt.Errorf("%q is not a group rule (group:NAME)", rule)
			}
			r.groups[g] = true
		case strings.HasPrefix(rule, "@"):
			d := strings.ToLower(rule[1:])
			if !validDomain(d) {
				return Rules{}, fmt.Errorf("%q is not a domain rule (@example.com)", rule)
			}
			r.domains[d] = true
		default:
			if _, ok := AdminName(rule); !ok {
				return Rules{}, fmt.Errorf("%q is not an e-mail address an admin can be named by, a domain (@example.com) or a group (group:NAME)", rule)
			}
			r.emails[strings.ToLower(rule)] = true
		}
	}
	return r, nil
}

// Allow reports whether a person with this verified e-mail address and
// these groups may sign in.
func (r Rules) Allow(email string, groups []string) bool {
	email = strings.ToLower(email)
	if _, ok := AdminName(email); !ok {
		return false
	}
	if r.emails[email] || r.domains[email[strings.LastIndexByte(email, '@')+1:]] {
		return true
	}
	for _, g := range groups {
		if r.groups[g] {
			return true
		}
	}
	return false
}

// AdminName is the admin an e-mail address signs in as: the address in
// lower case with its '@' written "_at_" (alice_at_example.com), since an
// admin acts as the principal "admin:<name>" and a principal holds no
// '@'. An address whose parts hold other characters than a name may, or
// too long for a principal, names no admin.
func AdminName(email string) (string, bool) {
	email = strings.ToLower(email)
	at := strings.LastIndexByte(email, '@')
	if at <= 0 {
		return "", false
	}
	local, domain := email[:at], email[at+1:]
	name := local + adminAt + domain
	if !namechars.Valid(local, principal.MaxBytes) || !validDomain(domain) ||
		len(name) > principal.MaxBytes-len(principal.AdminPrefix) {
		return "", false
	}
	return name, true
}

// validDomain reports whether d is a DNS name of at least two labels of
// lower-case letters, digits and inner hyphens.
func validDomain(d string) bool {
	labels := strings.Split(d, ".")
	if len(d) > 253 || len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
