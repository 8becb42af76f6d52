package principal

import "testing"

func TestValid(t *testing.T) {
	for name, want := range map[string]bool{
		"tok_0123456789ab":       true,
		"ci-bot.eu_1":            true,
		"":                       false,
		"local":                  false,
		"LOCAL":                  false,
		"Local":                  false,
		"a b":                    false,
		"a/b":                    false,
		"é":                      false,
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
	}
	for _, c := range cases {
		if got := c.who.Sees(c.owner); got != c.want {
			t.Errorf("%q.Sees(%q) = %v, want %v", c.who, c.owner, got, c.want)
		}
	}
}
