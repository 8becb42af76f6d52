package jobs

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/principal"
)

// TestReusedPIDIsNeverSignalled points a job's metadata at a live,
// unrelated process with other start ticks, as after PID reuse.
func TestReusedPIDIsNeverSignalled(t *testing.T) {
	svc := service(t, "/nonexistent")
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	cur, _, err := svc.procs.Lookup(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	boot, _ := svc.procs.BootID()
	id := uuid.NewString()
	job := &jobmeta.Job{Schema: 1, ID: id, DeviceID: svc.deviceID, FailureDomain: jobmeta.DomainSharedParentCgroup, CreatedAt: time.Now().UTC()}
	if err := svc.store.Admit(job); err != nil {
		t.Fatal(err)
	}
	stale := cur
	stale.StartTicks--
	ident := &jobmeta.Claim{Schema: 1, Supervisor: stale, BootID: boot, ClaimedAt: time.Now().UTC(), Child: &stale}
	if err := jobmeta.WriteAtomic(filepath.Join(svc.store.Dir(id), jobmeta.ClaimFile), ident); err != nil {
		t.Fatal(err)
	}
	_, err = svc.Stop(principal.Local, id)
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
