package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/statedir"
	"github.com/commandcore/commandcore/internal/testkit"
)

// record appends events to the journal in state and waits until they are
// written.
func record(t *testing.T, state string, events ...activity.Event) {
	t.Helper()
	j, err := activity.Open(statedir.JournalPath(state))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		j.Record(e)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestActivityLast(t *testing.T) {
	state := t.TempDir()
	record(t, state,
		activity.ToolCallEvent(activity.ToolProcessStart, doneJob, 35*time.Millisecond, nil),
		activity.ToolCallEvent(activity.ToolProcessStatus, doneJob, time.Millisecond, errcode.New(errcode.NotFound, "no such job")),
		activity.ToolCallEvent(activity.ToolProcessJobs, "", 2*time.Millisecond, nil))
	var out bytes.Buffer
	o := &activityOptions{IO: IO{Out: &out, Err: &out}, Ctx: context.Background(), StateDir: state, Once: true, Last: 2, JSON: true}
	if err := runActivity(o); err != nil {
		t.Fatal(err)
	}
	events, err := testkit.DecodeLines[activity.Event](out.Bytes())
	if err != nil || len(events) != 2 || events[0].Tool != activity.ToolProcessStatus || events[0].ErrorCode != "not_found" ||
		events[1].Tool != activity.ToolProcessJobs {
		t.Fatalf("activity --last 2 --json (%v):\n%s", err, out.String())
	}

	out.Reset()
	o.JSON, o.ErrorsOnly, o.Last = false, true, 10
	if err := runActivity(o); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); len(lines) != 1 ||
		!strings.Contains(lines[0], "tool_call     process.status    00000000  failed") || !strings.HasSuffix(lines[0], "1ms  not_found") {
		t.Fatalf("activity --errors:\n%s", out.String())
	}
}

func TestActivityWithoutJournal(t *testing.T) {
	var out bytes.Buffer
	o := &activityOptions{IO: IO{Out: &out, Err: &out}, Ctx: context.Background(), StateDir: t.TempDir(), Once: true, Last: 5}
	if err := runActivity(o); err != nil || out.Len() != 0 {
		t.Fatalf("no journal: %v, %q", err, out.String())
	}
}

// syncBuffer is a bytes.Buffer a follow writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestActivityFollow: a follow starts with what is there, prints what is
// recorded after, and ends with its context.
func TestActivityFollow(t *testing.T) {
	state := t.TempDir()
	record(t, state, activity.ToolCallEvent(activity.ToolProcessStart, doneJob, 0, nil))
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runActivity(&activityOptions{IO: IO{Out: &out, Err: &out}, Ctx: ctx, StateDir: state, JSON: true})
	}()
	record(t, state, activity.ToolCallEvent(activity.ToolProcessStop, liveJob, 0, nil))
	testkit.Eventually(t, 10*time.Second, func() error {
		if s := out.String(); !strings.Contains(s, `"tool":"process.stop"`) {
			return fmt.Errorf("the follow never printed the new entry:\n%s", s)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	events, err := testkit.DecodeLines[activity.Event]([]byte(out.String()))
	if err != nil || len(events) != 2 || events[0].Tool != activity.ToolProcessStart || events[1].JobID != liveJob {
		t.Fatalf("activity follow (%v):\n%s", err, out.String())
	}
}
