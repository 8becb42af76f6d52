package humantime

import (
	"strings"
	"testing"
	"time"
)

func TestTimeIsLocalWithZone(t *testing.T) {
	saved := time.Local
	t.Cleanup(func() { time.Local = saved })
	at := time.Date(2026, 12, 1, 8, 45, 42, 500_000_000, time.UTC)
	time.Local = time.UTC
	if got := Time(at); got != "Tue 2026-12-01 08:45:42 UTC" {
		t.Errorf("UTC: %q", got)
	}
	time.Local = time.FixedZone("CET", 3600)
	if got := Time(at); got != "Tue 2026-12-01 09:45:42 CET" {
		t.Errorf("CET: %q", got)
	}
}

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                   "0ms",
		-time.Second:                        "0ms",
		35 * time.Millisecond:               "35ms",
		999 * time.Millisecond:              "999ms",
		1234 * time.Millisecond:             "1.23s",
		200 * time.Second:                   "3m20s",
		26*time.Hour + 400*time.Millisecond: "26h0m0s",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestParseTTL: durations and whole days up to the bound; anything else
// is refused without echoing it.
func TestParseTTL(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"15m": 15 * time.Minute, "12h": 12 * time.Hour, "1d": 24 * time.Hour,
		"30d": 30 * 24 * time.Hour, "3650d": 3650 * 24 * time.Hour, "1ns": 1,
	} {
		if got, err := ParseTTL(in); err != nil || got != want {
			t.Errorf("ParseTTL(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "0s", "-1h", "0d", "-3d", "3651d", "xd", "forever", "1.5d"} {
		if d, err := ParseTTL(in); err == nil {
			t.Errorf("ParseTTL(%q) = %v, want an error", in, d)
		} else if len(in) > 3 && strings.Contains(err.Error(), in) {
			t.Errorf("ParseTTL(%q)'s error echoes it: %v", in, err)
		}
	}
	if MaxTTLDays != 3650 {
		t.Errorf("MaxTTLDays = %d; the CLI documents 3650", MaxTTLDays)
	}
}
