package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/testkit"
)

func (c *client) screen(id string) jobs.ScreenResult {
	c.t.Helper()
	var s jobs.ScreenResult
	c.ok("process.screen", map[string]any{"process_id": id}, &s)
	return s
}

// awaitScreen asks for a job's screen until ok accepts it.
func (c *client) awaitScreen(id string, ok func(jobs.ScreenResult) bool) jobs.ScreenResult {
	c.t.Helper()
	var s jobs.ScreenResult
	testkit.Eventually(c.t, 20*time.Second, func() error {
		if s = c.screen(id); !ok(s) {
			return fmt.Errorf("screen %q (alternate %v)", s.Lines, s.AlternateScreen)
		}
		return nil
	})
	return s
}

func pty(cols, rows int) map[string]any { return map[string]any{"cols": cols, "rows": rows} }

// checkScreen: a drawn screen reads as exactly its lines and cursor; less
// shows a file on its alternate screen; a flood of 2 MiB then a final
// drawing reads as the drawing; the last screen outlives the job and a
// restart of the server (restart may be nil).
func checkScreen(t *testing.T, c *client, restart func() *client) {
	drawn := c.start(map[string]any{"command": `printf 'junk\033[2J\033[3;5Hhello\033[1;1Htop'; exec sleep 60`, "pty": pty(20, 5)}).ProcessID
	defer func() { c.stopAndWait(drawn) }()
	s := c.awaitScreen(drawn, func(s jobs.ScreenResult) bool { return s.Lines[0] == "top" })
	if want := []string{"top", "", "    hello", "", ""}; !reflect.DeepEqual(s.Lines, want) || s.Cursor.Row != 0 || s.Cursor.Col != 3 ||
		s.Cols != 20 || s.Rows != 5 || s.AlternateScreen || s.Terminal {
		t.Fatalf("drawn screen: %+v", s)
	}

	file := filepath.Join(t.TempDir(), "notes.txt")
	var body strings.Builder
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&body, "line %d of the notes\n", i)
	}
	if err := os.WriteFile(file, []byte(body.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	less := c.start(map[string]any{"command": "exec less " + file, "pty": pty(80, 24), "env": map[string]string{"TERM": "xterm", "LESS": ""}}).ProcessID
	defer func() { c.stopAndWait(less) }()
	s = c.awaitScreen(less, func(s jobs.ScreenResult) bool { return s.AlternateScreen && s.Lines[0] == "line 1 of the notes" })
	if s.Lines[22] != "line 23 of the notes" {
		t.Fatalf("less shows %q", s.Lines)
	}

	flood := c.start(map[string]any{"command": `head -c 2000000 /dev/zero | tr '\0' x | fold -w 100; printf '\033[2J\033[HFINAL\033[24;1Hbottom'; exec sleep 60`, "pty": pty(80, 24)}).ProcessID
	defer func() { c.stopAndWait(flood) }()
	if res := waitFor(c, flood, map[string]any{"output": map[string]any{"text": "bottom"}}, 60000); res.Met != "output" {
		t.Fatalf("the flood's end: %+v", res)
	}
	s = c.screen(flood)
	if s.Lines[0] != "FINAL" || s.Lines[23] != "bottom" || strings.Join(s.Lines[1:23], "") != "" {
		t.Fatalf("after 2 MiB, the final screen: %q", s.Lines)
	}

	ends := c.start(map[string]any{"command": `printf '\033[2J\033[Hlast words\033[2;3H'; sleep 0.3`, "pty": pty(30, 4)}).ProcessID
	c.awaitScreen(ends, func(s jobs.ScreenResult) bool { return s.Lines[0] == "last words" })
	c.waitTerminal(ends, 20*time.Second)
	last := c.screen(ends)
	if !last.Terminal || last.Lines[0] != "last words" || last.Cursor.Row != 1 || last.Cursor.Col != 2 {
		t.Fatalf("the ended job's last screen: %+v", last)
	}
	if restart != nil {
		c = restart()
		if again := c.screen(ends); !reflect.DeepEqual(again, last) {
			t.Fatalf("after a restart, the last screen %+v, want %+v", again, last)
		}
		if live := c.screen(drawn); live.Lines[0] != "top" || live.Terminal {
			t.Fatalf("after a restart, the live screen %+v", live)
		}
	}
	plain := c.start(map[string]any{"command": "exec sleep 60"}).ProcessID
	defer func() { c.stopAndWait(plain) }()
	if code, _ := c.fail("process.screen", map[string]any{"process_id": plain}); code != "not_interactive" {
		t.Fatalf("the screen of a job without a terminal: %s, want not_interactive", code)
	}
}

// restartOf is a restart of side s's server: SIGKILLed, then started again.
func restartOf(s *side) func() *client {
	return func() *client {
		s.crash()
		return s.revive()
	}
}

func TestScreen(t *testing.T) {
	s := stdioSide(t)
	checkScreen(t, s.c, restartOf(s))
}

func TestRelayScreen(t *testing.T) {
	s := relaySide(t)
	checkScreen(t, s.c, restartOf(s))
}
