package principal

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for name, want := range map[string]bool{
		"tok_0123456789ab": true,
		"ci-bot.eu_1":      true,
		"":                 false,
		"local":            false,
		"LOCAL":            false,
		"Local":            false,
		"a b":              false,
		"a/b":              false,
		"é":                false,
		// The admin principals' names: no client token can take one.
		"admin:alice":            false,
		"admin:":                 false,
		"a:b":                    false,
		string(make([]byte, 65)): false,
	} {
		if got := Valid(name); got != want {
			t.Errorf("Valid(%q) = %v, want %v", name, got, want)
		}
	}
	long := ""
	for range 64 {
		long += "a"
	}
	if !Valid(long) || Valid(long+"a") {
		t.Error("the bound is 64 bytes")
	}
}

func TestSees(t *testing.T) {
	cases := []struct {
		who   Principal
		owner string
		want  bool
	}{
		{Local, "alice", true},
		{Local, "", true},
		{Local, "local", true},
		{"alice", "alice", true},
		{"alice", "bob", false},
		{"alice", "", false},
		{"alice", "local", false},
		{"alice", "Alice", false},
		{"", "", false},
		{Admin("alice"), "bob", true},
		{Admin("alice"), "", true},
		{Admin("alice"), "local", true},
		// An invalid admin name is nobody's admin, only a name.
		{"admin:", "bob", false},
		{"admin:a b", "bob", false},
	}
	for _, c := range cases {
		if got := c.who.Sees(c.owner); got != c.want {
			t.Errorf("%q.Sees(%q) = %v, want %v", c.who, c.owner, got, c.want)
		}
	}
}

func TestAdmin(t *testing.T) {
	if got := Admin("alice"); got != "admin:alice" {
		t.Fatalf("Admin(alice) = %q", got)
	}
	long := strings.Repeat("a", MaxBytes-len(AdminPrefix))
	for p, want := range map[Principal]bool{
		Admin("alice"):       true,
		Admin("ci-bot.eu_1"): true,
		Admin("local"):       true,
		Admin(long):          true,
		Admin(long + "a"):    false,
		Admin(""):            false,
		Admin("a b"):         false,
		Admin("a:b"):         false,
		Admin("é"):           false,
		"Admin:alice":        false,
		"alice":              false,
		Local:                false,
		"":                   false,
	} {
		if got := p.IsAdmin(); got != want {
			t.Errorf("%q.IsAdmin() = %v, want %v", p, got, want)
		}
	}
}
