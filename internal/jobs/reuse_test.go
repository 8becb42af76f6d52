package jobs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/principal"
)

// TestReusedPIDIsNeverSignalled points a job's metadata at a live,
// unrelated process with other start ticks, as after PID reuse.
func TestReusedPIDIsNeverSignalled(t *testing.T) {
	svc := service(t, "/nonexistent")
	id, _, cur := fallbackJob(t, svc, "", func(c *jobmeta.Claim) {
		stale := c.Supervisor
		stale.StartTicks--
		c.Supervisor, c.Child = stale, &stale
	})
	_, err := svc.Stop(principal.Local, id)
	if !errcode.Is(err, errcode.IdentityMismatch) {
		t.Fatalf("stop of a job whose PID was reused: %v, want identity_mismatch", err)
	}
	if _, err := os.Stat(filepath.Join(svc.store.Dir(id), jobmeta.StopFile)); err == nil {
		t.Fatal("a refused stop still recorded a stop request")
	}
	if alive, _ := svc.procs.Alive(cur); !alive {
		t.Fatal("the unrelated process was signalled")
	}
	rec, err := svc.Status(principal.Local, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State == jobmeta.Running || !rec.Terminal {
		t.Fatalf("a job whose PID belongs to another process is %s", rec.State)
	}
}
