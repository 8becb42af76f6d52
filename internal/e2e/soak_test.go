package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
)

// TestSoakRestartingServer keeps 32 jobs producing output while the MCP
// server is restarted 20 times, half of them by SIGKILL.
func TestSoakRestartingServer(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test")
	}
	state := t.TempDir()
	c := newClient(t, state, nil)
	const lines = 60
	want := map[string]int{}
	for i := 0; i < limits.MaxLiveJobs; i++ {
		cmd := fmt.Sprintf(`for n in $(seq 1 %d); do echo "job %02d line $n"; sleep 0.1; done; exit %d`, lines, i, i%7)
		want[c.start(map[string]any{"command": cmd}).ProcessID] = i
	}
	for r := 0; r < 20; r++ {
		if r%2 == 0 {
			c.kill()
		} else {
			c.session.Close()
		}
		c = newClient(t, state, nil)
		var list struct {
			Jobs []record `json:"jobs"`
		}
		c.ok("process.jobs", map[string]any{}, &list)
		if len(list.Jobs) != len(want) {
			t.Fatalf("restart %d: %d jobs listed, want %d", r, len(list.Jobs), len(want))
		}
		for _, j := range list.Jobs {
			if _, ok := want[j.ProcessID]; !ok {
				t.Fatalf("restart %d: unknown job %s", r, j.ProcessID)
			}
			if j.Terminal && j.State != "exited" {
				t.Fatalf("restart %d: job %s ended %s", r, j.ProcessID, j.State)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	for id, i := range want {
		rec := c.waitTerminal(id, time.Minute)
		if rec.State != "exited" || rec.ExitCode == nil || *rec.ExitCode != i%7 {
			t.Errorf("job %d ended %s exit %v, want exited %d", i, rec.State, rec.ExitCode, i%7)
			continue
		}
		// "job NN line N\n": 12 bytes plus the digits of N.
		wantBytes := int64(0)
		for n := 1; n <= lines; n++ {
			wantBytes += int64(13 + len(fmt.Sprint(n)))
		}
		if so := rec.Capture.Stdout; so.ObservedBytes == nil || *so.ObservedBytes != wantBytes || !so.Complete {
			t.Errorf("job %d stdout capture %+v, want exactly %d bytes, complete", i, so, wantBytes)
		}
	}
}
