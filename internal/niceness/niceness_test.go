package niceness

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
)

// threadNice is field 19 of /proc/thread-self/stat, as ps shows it.
func threadNice(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile("/proc/thread-self/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Field 3 is the first after the parenthesised command.
	n, err := strconv.Atoi(strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))[16])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLowerNeverRaises: Lower(7) gives niceness 7 as the kernel reports
// it, and a later Lower(3) leaves it at 7 without an error.
func TestLowerNeverRaises(t *testing.T) {
	OnOwnThread(func() {
		base := threadNice(t)
		if cur, err := Current(); err != nil || cur != base {
			t.Errorf("Current() = %d, %v; the kernel says %d", cur, err, base)
			return
		}
		if base > 3 {
			t.Errorf("the test runs at niceness %d already", base)
			return
		}
		if err := Lower(7); err != nil || threadNice(t) != 7 {
			t.Errorf("Lower(7): %v, niceness %d", err, threadNice(t))
		}
		if err := Lower(3); err != nil || threadNice(t) != 7 {
			t.Errorf("Lower(3) after 7: %v, niceness %d", err, threadNice(t))
		}
		if cur, err := Current(); err != nil || cur != 7 {
			t.Errorf("Current() = %d, %v, want 7", cur, err)
		}
	})
}
