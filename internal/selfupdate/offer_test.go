package selfupdate

import (
	"strings"
	"testing"
)

// What an offer may be, at each end of each rule: a version of 1 to 64
// bytes of printable ASCII without spaces, a SHA-256 of exactly 64
// lowercase hex digits, a name of 1 to 128 bytes of letters, digits, '.',
// '_' and '-' not starting with '.'.
func TestOfferValidAtTheBounds(t *testing.T) {
	good := Offer{Version: "1.2.3", SHA256: strings.Repeat("0123456789abcdef", 4), Name: "commandcore-linux-amd64"}
	if !good.Valid() {
		t.Fatalf("%+v is refused", good)
	}
	for _, tc := range []struct {
		change func(*Offer)
		valid  bool
		what   string
	}{
		{func(o *Offer) { o.Version = strings.Repeat("9", 64) }, true, "a version of 64 bytes"},
		{func(o *Offer) { o.Version = strings.Repeat("9", 65) }, false, "a version of 65 bytes"},
		{func(o *Offer) { o.Version = "!" }, true, "a version of '!'"},
		{func(o *Offer) { o.Version = "1.2.3~rc1" }, true, "a version with '~'"},
		{func(o *Offer) { o.Version = "1.2.3\x7f" }, false, "a version with DEL"},
		{func(o *Offer) { o.Version = "1.2.3\x1f" }, false, "a version with a control character"},
		{func(o *Offer) { o.Version = "1.2.3\t" }, false, "a version with a tab"},
		{func(o *Offer) { o.Version = "1.2.é" }, false, "a version with a non-ASCII letter"},
		{func(o *Offer) { o.SHA256 = o.SHA256[:63] }, false, "63 hex digits"},
		{func(o *Offer) { o.SHA256 += "0" }, false, "65 hex digits"},
		{func(o *Offer) { o.SHA256 = "/" + o.SHA256[1:] }, false, "a SHA-256 with '/'"},
		{func(o *Offer) { o.SHA256 = ":" + o.SHA256[1:] }, false, "a SHA-256 with ':'"},
		{func(o *Offer) { o.SHA256 = "`" + o.SHA256[1:] }, false, "a SHA-256 with '`'"},
		{func(o *Offer) { o.SHA256 = "g" + o.SHA256[1:] }, false, "a SHA-256 with 'g'"},
		{func(o *Offer) { o.SHA256 = strings.Repeat("f", 64) }, true, "a SHA-256 of 'f's"},
		{func(o *Offer) { o.SHA256 = strings.Repeat("9", 64) }, true, "a SHA-256 of '9's"},
		{func(o *Offer) { o.SHA256 = strings.Repeat("a", 64) }, true, "a SHA-256 of 'a's"},
		{func(o *Offer) { o.Name = strings.Repeat("x", 128) }, true, "a name of 128 bytes"},
		{func(o *Offer) { o.Name = strings.Repeat("x", 129) }, false, "a name of 129 bytes"},
		{func(o *Offer) { o.Name = "" }, false, "no name"},
		{func(o *Offer) { o.Name = "x.y" }, true, "a name with '.' inside"},
		{func(o *Offer) { o.Name = "." }, false, "the name '.'"},
	} {
		o := good
		tc.change(&o)
		if got := o.Valid(); got != tc.valid {
			t.Errorf("%s: Valid = %v, want %v", tc.what, got, tc.valid)
		}
	}
}

// A version that is not X.Y.Z of decimal numbers is not a release: it is
// as old as "dev".
func TestCompareTakesOnlyNumbers(t *testing.T) {
	for _, v := range []string{"1.2.x", "x.2.3", "1..3", "1.2.", "+1.2.3", "1.+2.3", "1.2.-3", "1.2.0x1", "1.2.3.4", "4294967296.0.0", ""} {
		if got := Compare(v, "dev"); got != 0 {
			t.Errorf("Compare(%q, dev) = %d, want 0", v, got)
		}
		if got := Compare(v, "0.0.0"); got != -1 {
			t.Errorf("Compare(%q, 0.0.0) = %d, want -1", v, got)
		}
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.2.4", "1.2.3", 1}, {"1.2.3", "1.2.4", -1}, {"1.3.0", "1.2.9", 1}, {"0.0.0", "dev", 1},
		{"4294967295.0.0", "4294967294.9.9", 1}, {"v2.0.0-rc1", "v2.0.0-rc2", 0}, {"01.2.3", "1.2.3", 0},
	} {
		if got := Compare(tc.a, tc.b); got != tc.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// Going between two spellings of one release is no downgrade; between two
// builds that are not releases it is, as their order is unknown.
func TestIsDowngrade(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		want     bool
	}{
		{"1.2.3", "1.2.3", false},
		{"1.2.3-rc1", "1.2.3", false},
		{"1.2.3", "v1.2.3", false},
		{"1.2.3", "1.2.3-hotfix", false},
		{"1.2.3", "1.2.4", false},
		{"1.2.4", "1.2.3", true},
		{"dev", "1.0.0", false},
		{"1.0.0", "dev", true},
		{"dev", "dev", false},
		{"dev", "dev2", true},
	} {
		if got := IsDowngrade(tc.from, tc.to); got != tc.want {
			t.Errorf("IsDowngrade(%q, %q) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}
