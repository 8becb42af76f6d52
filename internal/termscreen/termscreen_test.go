package termscreen

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/capture"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/terminal"
)

func screenOf(t *testing.T, size terminal.Size, output string) jobmeta.Screen {
	t.Helper()
	term := New(size)
	defer term.Close()
	term.Write([]byte(output))
	return term.Screen()
}

func lines(rows int, set map[int]string) []string {
	out := make([]string, rows)
	for i, l := range set {
		out[i] = l
	}
	return out
}

func TestScreens(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   terminal.Size
		output string
		want   jobmeta.Screen
	}{
		{"clear, move, text", terminal.Size{Cols: 20, Rows: 5}, "junk\r\nmore\x1b[2J\x1b[3;5Hhello\x1b[1;1Htop",
			jobmeta.Screen{Lines: lines(5, map[int]string{0: "top", 2: "    hello"}), Cursor: jobmeta.Cursor{Row: 0, Col: 3}}},
		{"scrolled", terminal.Size{Cols: 10, Rows: 3}, "1\r\n2\r\n3\r\n4\r\n5",
			jobmeta.Screen{Lines: []string{"3", "4", "5"}, Cursor: jobmeta.Cursor{Row: 2, Col: 1}}},
		{"colours are not text", terminal.Size{Cols: 10, Rows: 2}, "\x1b[1;31mred\x1b[0m ok",
			jobmeta.Screen{Lines: []string{"red ok", ""}, Cursor: jobmeta.Cursor{Row: 0, Col: 6}}},
		{"alternate screen and title", terminal.Size{Cols: 10, Rows: 2}, "main\x1b]2;my title\x07\x1b[?1049h\x1b[Hfull",
			jobmeta.Screen{Lines: []string{"full", ""}, Cursor: jobmeta.Cursor{Row: 0, Col: 4}, AlternateScreen: true, Title: "my title"}},
		{"back from the alternate screen", terminal.Size{Cols: 10, Rows: 2}, "main\x1b[?1049h\x1b[Hfull\x1b[?1049l",
			jobmeta.Screen{Lines: []string{"main", ""}, Cursor: jobmeta.Cursor{Row: 0, Col: 4}}},
		{"wide characters", terminal.Size{Cols: 10, Rows: 1}, "a漢字b",
			jobmeta.Screen{Lines: []string{"a漢字b"}, Cursor: jobmeta.Cursor{Row: 0, Col: 6}}},
		// The cursor stays on the last column, as xterm's does.
		{"a full row", terminal.Size{Cols: 3, Rows: 2}, "abc",
			jobmeta.Screen{Lines: []string{"abc", ""}, Cursor: jobmeta.Cursor{Row: 0, Col: 2}}},
		{"a byte that is not UTF-8 is dropped", terminal.Size{Cols: 10, Rows: 1}, "a\xffb",
			jobmeta.Screen{Lines: []string{"ab"}, Cursor: jobmeta.Cursor{Row: 0, Col: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := screenOf(t, tc.size, tc.output)
			tc.want.Schema, tc.want.Cols, tc.want.Rows = jobmeta.SchemaVersion, tc.size.Cols, tc.size.Rows
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("screen\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestQueriesDoNotBlock: a program's queries (device attributes, cursor
// position) are answered into nothing, and the terminal goes on.
func TestQueriesDoNotBlock(t *testing.T) {
	done := make(chan jobmeta.Screen)
	go func() {
		done <- screenOf(t, terminal.Size{Cols: 10, Rows: 1}, strings.Repeat("\x1b[c\x1b[6n\x1b[>c", 100)+"after")
	}()
	select {
	case s := <-done:
		if s.Lines[0] != "after" {
			t.Fatalf("after the queries: %q", s.Lines[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal blocked on a query's answer")
	}
}

func TestLargeScreenIsTruncated(t *testing.T) {
	size := terminal.Size{Cols: limits.TerminalDimensionMax, Rows: limits.TerminalDimensionMax}
	s := screenOf(t, size, strings.Repeat(strings.Repeat("x", size.Cols), size.Rows))
	kept := limits.ScreenTextMaxBytes / size.Cols
	if !s.Truncated || s.Lines[kept-1] != strings.Repeat("x", size.Cols) || s.Lines[kept] != "" || len(s.Lines) != size.Rows {
		t.Fatalf("truncated %v, line %d %d bytes, line %d %d bytes", s.Truncated, kept-1, len(s.Lines[kept-1]), kept, len(s.Lines[kept]))
	}
	if small := screenOf(t, terminal.Size{Cols: 80, Rows: 24}, strings.Repeat("y", 80*24)); small.Truncated {
		t.Fatal("a full 80x24 screen is truncated")
	}
}

// TestScreenTextBudget: a row that fills the text budget exactly is kept;
// once a row does not fit, no row after it is, however short.
func TestScreenTextBudget(t *testing.T) {
	const cols = 1024
	rows := limits.ScreenTextMaxBytes/cols + 2
	full := strings.Repeat("x", cols)
	out := strings.Repeat(full, rows-1) + "end"
	s := screenOf(t, terminal.Size{Cols: cols, Rows: rows}, out)
	kept := limits.ScreenTextMaxBytes / cols
	if s.Lines[kept-1] != full || s.Lines[kept] != "" || s.Lines[rows-1] != "" || !s.Truncated {
		t.Fatalf("row %d %d bytes, row %d %d bytes, last row %q, truncated %v; want the budget's rows exactly",
			kept-1, len(s.Lines[kept-1]), kept, len(s.Lines[kept]), s.Lines[rows-1], s.Truncated)
	}
	// Rows of 1000 leave 72 bytes of the budget when the next does not
	// fit: a short row after it is not kept either.
	full = strings.Repeat("x", 1000)
	kept = limits.ScreenTextMaxBytes / 1000
	s = screenOf(t, terminal.Size{Cols: 1000, Rows: kept + 2}, strings.Repeat(full, kept+1)+"end")
	if s.Lines[kept-1] != full || s.Lines[kept] != "" || s.Lines[kept+1] != "" {
		t.Fatalf("the row after the first that did not fit: %q", s.Lines[kept+1])
	}
}

func TestResize(t *testing.T) {
	term := New(terminal.Size{Cols: 10, Rows: 2})
	defer term.Close()
	term.Write([]byte("abc"))
	term.Resize(terminal.Size{Cols: 40, Rows: 6})
	if s := term.Screen(); s.Cols != 40 || s.Rows != 6 || len(s.Lines) != 6 || s.Lines[0] != "abc" {
		t.Fatalf("after a resize: %+v", s)
	}
}

// follow returns a capture writer and a Follower of it.
func follow(t *testing.T, size terminal.Size) (*capture.Writer, *Follower, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, jobmeta.StdoutFile)
	w, err := capture.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	fl, err := Follow(path, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fl.Close(); w.Close() })
	return w, fl, dir
}

func TestFollowerSeesEveryWrite(t *testing.T) {
	w, fl, dir := follow(t, terminal.Size{Cols: 20, Rows: 3})
	w.Write([]byte("one\r\n"))
	s, err := fl.Screen()
	if err != nil || s.Lines[0] != "one" || s.Offset != 5 {
		t.Fatalf("after one write: %+v, %v", s, err)
	}
	// A sequence split across writes.
	w.Write([]byte("\x1b[2"))
	time.Sleep(2 * limits.ScreenFollowInterval)
	w.Write([]byte("J\x1b[Hdone"))
	if s, _ = fl.Screen(); !reflect.DeepEqual(s.Lines, []string{"done", "", ""}) {
		t.Fatalf("a sequence split across writes: %q", s.Lines)
	}
	path := filepath.Join(dir, jobmeta.ScreenFile)
	if err := fl.Publish(path); err != nil {
		t.Fatal(err)
	}
	back, err := jobmeta.Read[jobmeta.Screen](path)
	if err != nil || !reflect.DeepEqual(*back, s) {
		t.Fatalf("published %+v, %v; want %+v", back, err, s)
	}
	fl.Close()
	fl.Close()
}

// TestFollowerAfterAFlood: 2 MiB scrolled past faster than the follower
// feeds it, then a final screen drawn: the screen is that final screen.
func TestFollowerAfterAFlood(t *testing.T) {
	w, fl, _ := follow(t, terminal.Size{Cols: 80, Rows: 24})
	w.Write([]byte("\x1b[?1049h"))
	line := []byte(strings.Repeat("scrolling ", 7) + "\r\n")
	for n := 0; n < 2<<20; n += len(line) {
		w.Write(line)
	}
	w.Write([]byte("\x1b[2J\x1b[HFINAL TOP\x1b[24;1HFINAL BOTTOM\x1b[12;30H"))
	s, err := fl.Screen()
	if err != nil {
		t.Fatal(err)
	}
	want := lines(24, map[int]string{0: "FINAL TOP", 23: "FINAL BOTTOM"})
	if !reflect.DeepEqual(s.Lines, want) || s.Cursor != (jobmeta.Cursor{Row: 11, Col: 29}) || !s.AlternateScreen {
		t.Fatalf("after the flood: %q cursor %+v alt %v", s.Lines, s.Cursor, s.AlternateScreen)
	}
	if m := w.Meta(); s.Offset != m.ObservedBytes {
		t.Fatalf("screen at %d, stream at %d", s.Offset, m.ObservedBytes)
	}
}

// TestFollowerFedSlowly: output written at a pace the follower keeps up
// with reaches it whole; here every line a screen showed once is counted
// by its last row.
func TestFollowerFedSlowly(t *testing.T) {
	w, fl, _ := follow(t, terminal.Size{Cols: 20, Rows: 2})
	for i := range 30 {
		fmt.Fprintf(w, "\x1b[2J\x1b[Hframe %d", i)
		if i%10 == 0 {
			time.Sleep(limits.ScreenFollowInterval)
		}
	}
	if s, _ := fl.Screen(); s.Lines[0] != "frame 29" {
		t.Fatalf("last frame: %q", s.Lines)
	}
}

func TestFollowerResizesAfterFeeding(t *testing.T) {
	w, fl, _ := follow(t, terminal.Size{Cols: 5, Rows: 2})
	w.Write([]byte("abcdefg"))
	fl.Resize(terminal.Size{Cols: 10, Rows: 3})
	w.Write([]byte("\r\nwide enough"))
	s, err := fl.Screen()
	// "abcde" wrapped at the old width, then scrolled off by the wrap of
	// 11 characters at the new one.
	if err != nil || s.Cols != 10 || s.Rows != 3 || !reflect.DeepEqual(s.Lines, []string{"fg", "wide enoug", "h"}) {
		t.Fatalf("after a resize: %+v, %v", s, err)
	}
}

func TestFollowerErrors(t *testing.T) {
	if _, err := Follow(filepath.Join(t.TempDir(), "none"), terminal.Size{Cols: 1, Rows: 1}); err == nil {
		t.Fatal("Follow of a missing capture succeeded")
	}
	_, fl, dir := follow(t, terminal.Size{Cols: 5, Rows: 2})
	if err := fl.Publish(filepath.Join(dir, "no", "such", jobmeta.ScreenFile)); err == nil {
		t.Fatal("Publish into a missing directory succeeded")
	}
}

// TestFollowerSkipsWhatTheCaptureDropped: past the head, a stream written
// faster than it is followed leaves a gap in the capture; the screen is
// drawn from what the capture kept, the alternate screen switched on at
// the start, in the head, included.
func TestFollowerSkipsWhatTheCaptureDropped(t *testing.T) {
	w, fl, _ := follow(t, terminal.Size{Cols: 20, Rows: 2})
	w.Write([]byte("\x1b[?1049h"))
	chunk := []byte(strings.Repeat("z", 1000) + "\r\n")
	for n := 0; n < 3<<20; n += len(chunk) {
		w.Write(chunk)
	}
	w.Write([]byte("\x1b[Hlast"))
	s, err := fl.Screen()
	if err != nil || !s.AlternateScreen || s.Lines[0] != "last"+strings.Repeat("z", 16) {
		t.Fatalf("after a gap: %+v, %v", s, err)
	}
}
