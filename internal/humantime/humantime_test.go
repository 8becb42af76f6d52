package humantime

import (
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
