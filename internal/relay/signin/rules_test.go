package signin

import (
	"strings"
	"testing"
)

// TestRulesAllow: e-mail addresses and domains match in any letter case
// and only whole, groups exactly; an address no admin can be named by
// never passes, whatever its groups.
func TestRulesAllow(t *testing.T) {
	r, err := ParseRules(" alice@Example.com , @corp.example, group:relay-admins")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		email  string
		groups []string
		want   bool
	}{
		{"alice@example.com", nil, true},
		{"ALICE@EXAMPLE.COM", nil, true},
		{"bob@example.com", nil, false},
		{"bob@corp.example", nil, true},
		{"bob@sub.corp.example", nil, false},
		{"bob@corp.example.evil", nil, false},
		{"carol@else.example", []string{"relay-admins"}, true},
		{"carol@else.example", []string{"Relay-Admins", "staff"}, false},
		{"carol+tag@corp.example", nil, false},
		{"", []string{"relay-admins"}, false},
		{"no-at-sign", []string{"relay-admins"}, false},
	} {
		if got := r.Allow(c.email, c.groups); got != c.want {
			t.Errorf("Allow(%q, %v) = %v, want %v", c.email, c.groups, got, c.want)
		}
	}
	if (Rules{}).Allow("alice@example.com", []string{"x"}) {
		t.Error("no rules let someone in")
	}
}

// TestParseRulesRefusesMalformed: each malformed rule is refused with a
// line that names it.
func TestParseRulesRefusesMalformed(t *testing.T) {
	for _, bad := range []string{"", "alice@example.com,", ",", "@", "@localhost", "@exa_mple.com", "@-a.com",
		"alice", "alice@", "@example.com@x", "a b@example.com", "group:", "group: x", "group:a\x00b",
		strings.Repeat("a", 300) + "@example.com", strings.Repeat("@a.com,", 300)} {
		_, err := ParseRules(bad)
		if err == nil {
			t.Errorf("ParseRules(%q) accepted it", bad)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseRules(%q): %q is not one line", bad, err)
		}
	}
}

// TestAdminName: the admin an address names is the address, lower-cased,
// with "_at_" for '@', short enough for a principal; two addresses never
// name one admin.
func TestAdminName(t *testing.T) {
	for in, want := range map[string]string{
		"Alice@Example.com":    "alice_at_example.com",
		"a.b_c-d@x.example":    "a.b_c-d_at_x.example",
		"x_at_y@z.example":     "x_at_y_at_z.example",
		"first.last@a-b.co.uk": "first.last_at_a-b.co.uk",
	} {
		if got, ok := AdminName(in); !ok || got != want {
			t.Errorf("AdminName(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "@x.com", "a@", "a@b", "a+b@x.com", "a@x_y.com", "a@@x.com", "é@x.com",
		strings.Repeat("a", 50) + "@example.com"} {
		if got, ok := AdminName(bad); ok {
			t.Errorf("AdminName(%q) = %q", bad, got)
		}
	}
}

// FuzzParseRules: whatever --oidc-allow holds, parsing refuses it with
// one line or gives rules that admit only addresses an admin can be named
// by.
func FuzzParseRules(f *testing.F) {
	for _, s := range []string{"alice@example.com", "@example.com,group:admins", "group:a b", ",,", "@x.y,@X.Y"} {
		f.Add(s, "alice@example.com", "admins")
	}
	f.Fuzz(func(t *testing.T, rules, email, group string) {
		r, err := ParseRules(rules)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\r\n") && !strings.ContainsAny(rules, "\r\n") {
				t.Fatalf("a refusal of two lines: %q", err)
			}
			return
		}
		if r.Allow(email, []string{group}) {
			if _, ok := AdminName(email); !ok {
				t.Fatalf("%q allowed in, but names no admin", email)
			}
		}
	})
}

// FuzzAdminName: two different addresses (in lower case) never name one
// admin, and every name is a valid admin principal's.
func FuzzAdminName(f *testing.F) {
	f.Add("a_at_b@c.example", "a@b_at_c.example")
	f.Add("alice@example.com", "ALICE@example.com")
	f.Fuzz(func(t *testing.T, a, b string) {
		na, oka := AdminName(a)
		nb, okb := AdminName(b)
		if oka && okb && na == nb && !strings.EqualFold(a, b) {
			t.Fatalf("%q and %q both name %q", a, b, na)
		}
		if oka && (len(na) > 58 || strings.ContainsAny(na, "@:/ ")) {
			t.Fatalf("%q names %q", a, na)
		}
	})
}
