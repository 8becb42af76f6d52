// Package termscreen renders a pty job's screen from what the job wrote to
// its terminal, with a maintained terminal emulator (charmbracelet/x/vt):
// a Follower reads the job's stdout capture as it grows and feeds the
// emulator, in the job's supervisor, which sees every byte while the
// capture still holds it, outlives any agent, and writes the last screen
// when the job ends.
package termscreen

import (
	"io"
	"strings"
	"unicode/utf8"

	"github.com/charmbracelet/x/vt"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/terminal"
)

// altScreenOn and altScreenOff switch the emulator to its alternate screen
// and back.
const (
	altScreenOn  = "\x1b[?1049h"
	altScreenOff = "\x1b[?1049l"
)

// Terminal is one emulated terminal.
type Terminal struct {
	emu   *vt.Emulator
	title string
}

// New returns a terminal of size with nothing on it.
func New(size terminal.Size) *Terminal {
	t := &Terminal{emu: vt.NewEmulator(size.Cols, size.Rows)}
	t.emu.SetCallbacks(vt.Callbacks{Title: func(s string) { t.title = s }})
	// No scrollback on either screen: a screen is what is visible, and a
	// scrollback copies each line that leaves it (10,000 lines by
	// default). A zero Scrollback keeps nothing.
	*t.emu.Scrollback() = vt.Scrollback{}
	t.emu.WriteString(altScreenOn)
	*t.emu.Scrollback() = vt.Scrollback{}
	t.emu.WriteString(altScreenOff)
	// What the emulator answers a program's queries with (its device
	// attributes, the cursor position) would go back to the job as
	// input; a job's input comes from process.input alone, so the answers
	// are read and dropped, which also keeps the emulator from blocking.
	go io.Copy(io.Discard, t.emu)
	return t
}

// Write feeds the emulator bytes the job wrote.
func (t *Terminal) Write(p []byte) { t.emu.Write(p) }

// WriteString is Write of a string.
func (t *Terminal) WriteString(s string) { t.emu.WriteString(s) }

// Resize gives the terminal a new size, as the job's does.
func (t *Terminal) Resize(size terminal.Size) { t.emu.Resize(size.Cols, size.Rows) }

// Close ends the reading of the emulator's answers. It closes the answers'
// pipe itself: the emulator's own Close sets a flag its Read looks at
// without a lock, a data race with the reader.
func (t *Terminal) Close() {
	if pw, ok := t.emu.InputPipe().(*io.PipeWriter); ok {
		pw.Close()
	}
}

// Screen returns what the terminal shows.
func (t *Terminal) Screen() jobmeta.Screen {
	w, h := t.emu.Width(), t.emu.Height()
	cur := t.emu.CursorPosition()
	s := jobmeta.Screen{
		Schema: jobmeta.SchemaVersion, Cols: w, Rows: h, Lines: make([]string, h),
		Cursor:          jobmeta.Cursor{Row: min(max(cur.Y, 0), h-1), Col: min(max(cur.X, 0), w)},
		AlternateScreen: t.emu.IsAltScreen(), Title: validText(t.title),
	}
	budget := limits.ScreenTextMaxBytes
	var b strings.Builder
	for y := range h {
		b.Reset()
		for x := 0; x < w; x++ {
			// A cell with nothing in it reads as a blank.
			if c := t.emu.CellAt(x, y); c != nil && c.Content != "" {
				b.WriteString(c.Content)
				// A wide character's second column holds nothing of its own.
				x += max(c.Width, 1) - 1
			} else {
				b.WriteByte(' ')
			}
		}
		line := validText(strings.TrimRight(b.String(), " "))
		if len(line) > budget {
			s.Truncated = true
			break
		}
		budget -= len(line)
		s.Lines[y] = line
	}
	return s
}

// validText is s with anything that is not UTF-8 replaced, as a JSON
// encoder would do it, so a screen reads back as it was written.
func validText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
