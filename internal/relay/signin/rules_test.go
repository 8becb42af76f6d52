package signin

import (
	"fmt"
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

// TestRulesBounds: --oidc-allow takes up to 256 rules of up to 256 bytes
// each, one more of either refused; a domain of up to 253 bytes in labels
// of up to 63, one byte more refused; an admin's name of up to 58
// characters, so that "admin:" and the name fit a 64-byte principal.
func TestRulesBounds(t *testing.T) {
	rules := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("u%d@example.com", i)
		}
		return strings.Join(s, ",")
	}
	if r, err := ParseRules(rules(256)); err != nil || !r.Allow("u255@example.com", nil) {
		t.Errorf("256 rules: %v", err)
	}
	if _, err := ParseRules(rules(257)); err == nil || !strings.Contains(err.Error(), "at most 256 rules") {
		t.Errorf("257 rules: %v", err)
	}

	group := strings.Repeat("g", 256-len("group:"))
	if r, err := ParseRules("group:" + group); err != nil || !r.Allow("carol@example.com", []string{group}) {
		t.Errorf("a rule of 256 bytes: %v", err)
	}
	if _, err := ParseRules("@example.com,group:" + group + "g"); err == nil || err.Error() != "rule 2 is empty or longer than 256 bytes" {
		t.Errorf("a rule of 257 bytes: %v", err)
	}

	// Labels of 63, 63, 63 and 61 bytes: 253 in all.
	label := strings.Repeat("d", 63)
	domain := label + "." + label + "." + label + "." + strings.Repeat("d", 61)
	if len(domain) != 253 {
		t.Fatalf("the domain is %d bytes", len(domain))
	}
	if _, err := ParseRules("@" + domain); err != nil {
		t.Errorf("a domain of 253 bytes: %v", err)
	}
	long := label + "." + label + "." + label + "." + strings.Repeat("d", 62)
	for _, bad := range []string{"@" + long, "@d" + label + ".example", "@" + label[:62] + "-.example"} {
		if _, err := ParseRules(bad); err == nil || !strings.Contains(err.Error(), "is not a domain rule") {
			t.Errorf("ParseRules(%q) = %v", bad, err)
		}
	}
	if _, err := ParseRules("@" + label + ".example"); err != nil {
		t.Errorf("a label of 63 bytes: %v", err)
	}

	// alice...@example.com names an admin of 58 characters: taken; with
	// one more letter it names none, as a rule or at sign-in.
	local := strings.Repeat("a", 58-len("_at_example.com"))
	if name, ok := AdminName(local + "@example.com"); !ok || len(name) != 58 {
		t.Errorf("an admin of 58 characters: %q, %v", name, ok)
	}
	if r, err := ParseRules(local + "@example.com,@example.com"); err != nil || !r.Allow(local+"@example.com", nil) {
		t.Errorf("the address of an admin of 58 characters: %v", err)
	} else if r.Allow(local+"a@example.com", nil) {
		t.Error("an address naming an admin of 59 characters let in by its domain")
	}
	if name, ok := AdminName(local + "a@example.com"); ok {
		t.Errorf("an admin of 59 characters: %q", name)
	}
	if _, err := ParseRules(local + "a@example.com"); err == nil {
		t.Error("a rule naming an admin of 59 characters accepted")
	}
}

// TestDomainCharacters: a domain (of a rule or an address) holds letters
// (any case, lower-cased), digits and inner hyphens, each of the ranges'
// ends included; the bytes just outside them are refused.
func TestDomainCharacters(t *testing.T) {
	for _, ok := range []string{"az09.example", "a-z.example", "AZ.Example", "0.9", "x-0-9.co"} {
		r, err := ParseRules("@" + ok)
		if err != nil || !r.Allow("alice@"+ok, nil) {
			t.Errorf("domain %q: %v", ok, err)
		}
		if name, ok2 := AdminName("alice@" + ok); !ok2 || name != "alice_at_"+strings.ToLower(ok) {
			t.Errorf("AdminName(alice@%s) = %q, %v", ok, name, ok2)
		}
	}
	for _, bad := range []string{"a`.example", "a{.example", "a/.example", "a:.example", "a-.example", "-a.example", "a..example", "a.example.", "a_b.example"} {
		if _, err := ParseRules("@" + bad); err == nil {
			t.Errorf("domain %q accepted", bad)
		}
		if name, ok := AdminName("alice@" + bad); ok {
			t.Errorf("AdminName(alice@%s) = %q", bad, name)
		}
	}
}

// TestParseRulesNamesTheRule: a malformed rule's refusal counts rules
// from 1, in the order given, whatever kind the earlier ones are and
// whether one repeats another.
func TestParseRulesNamesTheRule(t *testing.T) {
	for in, want := range map[string]string{
		",a@example.com":                            "rule 1 ",
		"a@example.com,@b.example,group:g,":         "rule 4 ",
		"a@example.com,a@example.com,":              "rule 3 ",
		"group:g, group:g ,@b.example,@B.example,,": "rule 5 ",
	} {
		if _, err := ParseRules(in); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ParseRules(%q) = %v, want %q…", in, err, want)
		}
	}
}
