package termscreen

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/capture"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/terminal"
)

// screenAfter writes outputs to a capture, each at once, and only then
// follows it: the follower meets all of it at its first feed, as it does
// output written faster than its period.
func screenAfter(t *testing.T, size terminal.Size, outputs ...string) jobmeta.Screen {
	t.Helper()
	path := filepath.Join(t.TempDir(), jobmeta.StdoutFile)
	w, err := capture.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, o := range outputs {
		w.Write([]byte(o))
	}
	fl, err := Follow(path, size)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	s, err := fl.Screen()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// filler is n bytes of lines that draw nothing that lasts.
func filler(n int) string {
	line := strings.Repeat("f", 79) + "\n"
	return strings.Repeat(line, n/len(line)+1)[:n]
}

var small = terminal.Size{Cols: 20, Rows: 3}

// TestFloodIsMoreThanTheFloodBytes: ScreenFloodBytes since the last feed
// are all fed (a title set at their start stays); one byte more is a
// flood, fed only its end.
func TestFloodIsMoreThanTheFloodBytes(t *testing.T) {
	title := "\x1b]2;T\x07"
	if s := screenAfter(t, small, title+filler(limits.ScreenFloodBytes-len(title))); s.Title != "T" {
		t.Fatalf("%d bytes: title %q, want them all fed", limits.ScreenFloodBytes, s.Title)
	}
	if s := screenAfter(t, small, title+filler(limits.ScreenFloodBytes+1-len(title))); s.Title != "" {
		t.Fatalf("%d bytes: title %q, want a flood's start skipped", limits.ScreenFloodBytes+1, s.Title)
	}
	// What counts is what came since the last feed, not since the start.
	path := filepath.Join(t.TempDir(), jobmeta.StdoutFile)
	w, err := capture.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fl, err := Follow(path, small)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	w.Write([]byte(filler(40 << 10)))
	if _, err := fl.Screen(); err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(title + filler(60<<10-len(title))))
	if s, err := fl.Screen(); err != nil || s.Title != "T" {
		t.Fatalf("60 KiB after 40 KiB fed: title %q, %v; want them all fed", s.Title, err)
	}
}

// TestFloodResumesAtALineStart: a flood is fed from the first line that
// begins in its last ScreenResyncBytes: the line the cut falls in is not
// fed, not even the sequences after the cut, and the bytes skipped are
// looked through for the alternate screen only up to the cut.
func TestFloodResumesAtALineStart(t *testing.T) {
	head := filler(40000)
	cutLine := strings.Repeat("a", 200) + "\x1b[?1049h\x1b]2;T\x07\r\n"
	// The cut is 100 bytes into cutLine.
	tail := filler(limits.ScreenResyncBytes - (len(cutLine) - 100))
	s := screenAfter(t, small, head+cutLine+tail)
	if s.Title != "" || s.AlternateScreen {
		t.Fatalf("title %q, alternate screen %v; want the cut line's sequences unfed", s.Title, s.AlternateScreen)
	}
	// A cut that falls on a newline feeds from the byte after it: the
	// cursor has not moved when X is drawn.
	after := "X" + strings.Repeat("\x1b[C", (limits.ScreenResyncBytes-2)/3)
	s = screenAfter(t, small, filler(40000)+"\n"+after)
	if s.Lines[0] != "X" || s.Cursor.Row != 0 {
		t.Fatalf("lines %q, cursor %+v; want X on the first row", s.Lines, s.Cursor)
	}
}

// TestFloodKeepsASwitchSplitAcrossReads: the alternate screen switched on
// in the skipped bytes, by a sequence split across two of the reads that
// look through them, is on.
func TestFloodKeepsASwitchSplitAcrossReads(t *testing.T) {
	before := filler(readBytes - 5)
	s := screenAfter(t, small, before+"\x1b[?1049h"+filler(100<<10))
	if !s.AlternateScreen {
		t.Fatal("the alternate screen switched on in a flood's skipped bytes reads as off")
	}
}

func TestPauses(t *testing.T) {
	var p pauses
	for i, tc := range []struct {
		before, after int64
		want          bool
	}{
		{0, 0, false}, // nothing fed yet
		{0, 5, false},
		{5, 9, false},
		{9, 9, true}, // the first pause after output
		{9, 9, false},
		{9, 12, false},
		{12, 12, true},
	} {
		if got := p.tick(tc.before, tc.after); got != tc.want {
			t.Fatalf("tick %d (%d to %d): %v, want %v", i, tc.before, tc.after, got, tc.want)
		}
	}
}
