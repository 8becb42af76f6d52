package selfupdate

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// noUserManager leaves the watchdog's restarts nothing to reach: they fail
// at once, and only the link note decides.
func noUserManager(t *testing.T) {
	t.Helper()
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", "")
}

// updated is an installed binary "old" replaced by "new", the previous
// one kept beside it, as Apply leaves it for the watchdog.
func updated(t *testing.T) string {
	t.Helper()
	exe := installed(t, "old")
	next := exe + ".next"
	if err := os.WriteFile(next, []byte("new"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Swap(exe, next); err != nil {
		t.Fatal(err)
	}
	return exe
}

// The contract: a new agent has 60 s to link, its note read every 200 ms,
// when the watchdog is given no other wait. The clock is synctest's, so
// the times are exact.
func TestWatchdogGivesTheNewAgentSixtySeconds(t *testing.T) {
	noUserManager(t)
	t.Run("linked at 59.7 s", func(t *testing.T) {
		exe, state := updated(t), t.TempDir()
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			go func() {
				time.Sleep(59700 * time.Millisecond)
				NoteLinked(state, "1.2.0", time.Now())
			}()
			w := Watch{Service: "cc.service", Exe: exe, StateDir: state, From: "1.1.0", To: "1.2.0"}
			if got := w.Run(context.Background()); got != StateDone {
				t.Fatalf("Run = %s for an agent that linked at 59.7 s", got)
			}
			// Taken at the next read of the note, 200 ms after the last.
			if took := time.Since(start); took != 59800*time.Millisecond {
				t.Errorf("the link was taken after %v, want 59.8s", took)
			}
		})
		if read(t, exe) != "new" {
			t.Error("the new binary was taken back")
		}
	})
	t.Run("not linked", func(t *testing.T) {
		exe, state := updated(t), t.TempDir()
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			w := Watch{Service: "cc.service", Exe: exe, StateDir: state, From: "1.1.0", To: "1.2.0"}
			if got := w.Run(context.Background()); got != StateRolledBack {
				t.Fatalf("Run = %s for an agent that never linked", got)
			}
			if took := time.Since(start); took != 60*time.Second {
				t.Errorf("rolled back after %v, want 60s", took)
			}
		})
		if read(t, exe) != "old" {
			t.Error("the previous binary is not back")
		}
	})
}

// A watchdog stopped before the new agent linked (its unit stopped) puts
// the previous binary back rather than leave an unproven one.
func TestWatchdogStoppedRollsBack(t *testing.T) {
	noUserManager(t)
	exe, state := updated(t), t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(5 * time.Second)
			cancel()
		}()
		start := time.Now()
		w := Watch{Service: "cc.service", Exe: exe, StateDir: state, From: "1.1.0", To: "1.2.0"}
		if got := w.Run(ctx); got != StateRolledBack {
			t.Fatalf("Run = %s", got)
		}
		if took := time.Since(start); took != 5*time.Second {
			t.Errorf("rolled back %v after the start, want 5s (when stopped)", took)
		}
	})
	if read(t, exe) != "old" {
		t.Error("the previous binary is not back")
	}
}

// Without a previous binary to put back, the rollback fails, and the
// record says so: the installed binary is still the new one.
func TestWatchdogRecordsAFailedRollback(t *testing.T) {
	noUserManager(t)
	exe, state := installed(t, "new"), t.TempDir()
	w := Watch{Service: "cc.service", Exe: exe, StateDir: state, From: "1.1.0", To: "1.2.0", Wait: 50 * time.Millisecond, Poll: 10 * time.Millisecond}
	if got := w.Run(context.Background()); got != StateRollbackFailed {
		t.Fatalf("Run = %s without a previous binary", got)
	}
	if read(t, exe) != "new" {
		t.Error("the installed binary changed")
	}
	if r, err := ReadRecord(state); err != nil || r == nil || r.State != StateRollbackFailed || r.EndedAt == nil {
		t.Errorf("record %+v, %v", r, err)
	}
}

// The record the watchdog leaves keeps when the update started: Apply's
// start, for the update Apply recorded as started; otherwise (no record,
// another update's, one that ended, one unreadable) the watchdog's own.
func TestWatchdogKeepsTheUpdatesStart(t *testing.T) {
	noUserManager(t)
	applied := time.Date(1999, 12, 31, 23, 59, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		before    *Record
		raw       string
		fromApply bool
	}{
		"this update, started": {before: &Record{From: "1.1.0", To: "1.2.0", State: StateStarted, StartedAt: applied}, fromApply: true},
		"none":                 {},
		"another update":       {before: &Record{From: "1.0.0", To: "1.1.0", State: StateStarted, StartedAt: applied}},
		"this update, ended":   {before: &Record{From: "1.1.0", To: "1.2.0", State: StateRolledBack, StartedAt: applied, EndedAt: &applied}},
		"unreadable":           {raw: `{"to": "1.2.0", "state": "started", "started_at": "1999-12-31T23:59:00Z"`},
	} {
		t.Run(name, func(t *testing.T) {
			exe, state := updated(t), t.TempDir()
			if tc.before != nil {
				if err := WriteRecord(state, *tc.before); err != nil {
					t.Fatal(err)
				}
			}
			if tc.raw != "" {
				if err := os.WriteFile(filepath.Join(state, RecordFile), []byte(tc.raw), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			synctest.Test(t, func(t *testing.T) {
				began := time.Now()
				w := Watch{Service: "cc.service", Exe: exe, StateDir: state, From: "1.1.0", To: "1.2.0", Wait: time.Second}
				if got := w.Run(context.Background()); got != StateRolledBack {
					t.Fatalf("Run = %s", got)
				}
				r, err := ReadRecord(state)
				if err != nil || r == nil {
					t.Fatalf("record %+v, %v", r, err)
				}
				want := began
				if tc.fromApply {
					want = applied
				}
				if !r.StartedAt.Equal(want) || r.From != "1.1.0" || r.To != "1.2.0" || r.State != StateRolledBack ||
					r.EndedAt == nil || !r.EndedAt.Equal(began.Add(time.Second)) {
					t.Errorf("record %+v, want started at %v, ended at %v", r, want, began.Add(time.Second))
				}
			})
		})
	}
}
