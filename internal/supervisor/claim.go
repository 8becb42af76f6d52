package supervisor

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/procid"
)

// claim records who this supervisor is, atomically, before any shell runs.
func (s *sup) claim() error {
	self, err := s.procs.Self()
	if err != nil {
		return err
	}
	boot, err := s.procs.BootID()
	if err != nil {
		return err
	}
	s.claimed = jobmeta.Claim{
		Schema:       jobmeta.SchemaVersion,
		Supervisor:   self,
		BootID:       boot,
		InvocationID: os.Getenv("INVOCATION_ID"),
		ClaimedAt:    time.Now().UTC(),
	}
	// systemd tells its services the manager's PID; record its incarnation
	// so its later disappearance can be recognised.
	if pid, err := strconv.Atoi(os.Getenv("MANAGERPID")); err == nil && pid > 0 {
		if m, _, err := s.procs.Lookup(pid); err == nil {
			s.claimed.Manager = &m
		}
	}
	if err := atomicfile.WriteJSON(s.path(jobmeta.ClaimFile), &s.claimed); err != nil {
		return err
	}
	// The unit is Type=notify: its start job completes exactly when the
	// claim is on disk, so the launcher need not poll for it. Without
	// $NOTIFY_SOCKET (the fallback) this does nothing.
	daemon.SdNotify(false, daemon.SdNotifyReady)
	return nil
}

// recordChild adds the shell's identity to the claim: the group it leads
// is how survivors of a job are found after its end.
func (s *sup) recordChild(child procid.Identity) error {
	started := time.Now().UTC()
	s.claimed.Child = &child
	s.claimed.StartedAt = &started
	if err := atomicfile.WriteJSON(s.path(jobmeta.ClaimFile), &s.claimed); err != nil {
		return fmt.Errorf("record child identity: %w", err)
	}
	return nil
}
