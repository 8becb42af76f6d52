package textenc

import (
	"encoding/base64"
	"testing"
)

func TestEncode(t *testing.T) {
	if d, e := Encode([]byte("été")); d != "été" || e != UTF8 {
		t.Fatalf("text: %q %s", d, e)
	}
	raw := []byte{'a', 0xff, 0}
	d, e := Encode(raw)
	back, err := base64.StdEncoding.DecodeString(d)
	if e != Base64 || err != nil || string(back) != string(raw) {
		t.Fatalf("binary: %q %s", d, e)
	}
}

func TestPartialTail(t *testing.T) {
	euro := "€" // 3 bytes
	cases := []struct {
		in   string
		want int
	}{
		{"abc", 0},
		{"ab" + euro[:1], 1},
		{"ab" + euro[:2], 2},
		{euro[:2], 2},
		{"a\xff" + euro[:2], 0}, // invalid before the tail: not text anyway
		{"ab\xff", 0},
	}
	for _, c := range cases {
		if got := PartialTail([]byte(c.in)); got != c.want {
			t.Errorf("%q: %d, want %d", c.in, got, c.want)
		}
	}
}
