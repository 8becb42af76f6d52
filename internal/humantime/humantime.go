// Package humantime is how the CLI's human output shows times and
// durations, one way everywhere (jobs list, show and wait, activity): a
// time in local time with its zone and weekday, as systemctl prints it
// (Tue 2026-12-01 08:45:42 UTC), a duration compactly (35ms, 1.25s, 3m20s).
package humantime

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Layout is the time layout of human output.
const Layout = "Mon 2006-01-02 15:04:05 MST"

// Time formats t in local time.
func Time(t time.Time) string { return t.Local().Format(Layout) }

// Duration formats d: milliseconds under a second, hundredths under a
// minute, whole seconds above. A negative d (a clock that stepped back)
// prints as 0ms.
func Duration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", max(d, 0).Milliseconds())
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// MaxTTLDays bounds a lifetime given in days.
const MaxTTLDays = 3650

// ParseTTL reads a lifetime as people give one to the relay (a code's, a
// token's): a positive Go duration (15m, 12h) or whole days (30d, at most
// MaxTTLDays). The error says what is wanted, without repeating v.
func ParseTTL(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > MaxTTLDays {
			return 0, fmt.Errorf("not a number of days between 1 and %d", MaxTTLDays)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, errors.New("not a positive duration (like 15m, 12h or 30d)")
	}
	return d, nil
}
