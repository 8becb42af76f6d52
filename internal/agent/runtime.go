package agent

import (
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/isolation"
	"github.com/commandcore/commandcore/internal/status"
)

// runtimeRecord is the agent's runtime record, written whenever what it
// says changes; the link reports from its own goroutine.
type runtimeRecord struct {
	stateDir, path string
	mu             sync.Mutex
	rt             status.Runtime
}

func newRuntimeRecord(stateDir string, rt status.Runtime) *runtimeRecord {
	return &runtimeRecord{stateDir: stateDir, path: filepath.Join(stateDir, status.RuntimeFile), rt: rt}
}

func (r *runtimeRecord) write() error {
	if err := atomicfile.WriteJSON(r.path, &r.rt); err != nil {
		return fmt.Errorf("write runtime record: %w", err)
	}
	return nil
}

// observe refreshes when the agent last looked at its connection, and what
// it sees of its user manager.
func (r *runtimeRecord) observe(sd *status.RuntimeSystemd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rt.Connection.ObservedAt = time.Now().UTC()
	r.rt.Systemd = sd
	r.write()
}

// stop marks the record as that of an agent that stopped cleanly, so
// status tells it from one that died ("stale record"). A record another
// agent wrote meanwhile over the same state is left alone.
func (r *runtimeRecord) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, err := status.ReadRuntime(r.stateDir); err != nil || cur.PID != r.rt.PID || cur.StartTicks != r.rt.StartTicks {
		return
	}
	at := time.Now().UTC()
	r.rt.StoppedAt = &at
	r.write()
}

// setServer names the server the link goes to.
func (r *runtimeRecord) setServer(server string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rt.Connection.Server = server
}

func (r *runtimeRecord) setConnection(state string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &r.rt.Connection
	if c.State != state {
		c.State, c.Since = state, at
	}
	c.ObservedAt = at
	r.write()
}

// server is the URL the link goes to now.
func (r *runtimeRecord) server() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rt.Connection.Server
}

// setOffer records the update the relay offers (nil: none).
func (r *runtimeRecord) setOffer(o *status.RuntimeOffer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rt.Offer = o
	r.write()
}

// isolation is the record's word on how jobs meet the agent's binary and,
// with cut (the owner's word), the user manager.
func (r *runtimeRecord) isolation(cut bool) isolation.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rep isolation.Report
	if b := r.rt.AgentBinary; b != nil {
		rep.AgentBinary = isolation.Binary(b.Writable, b.Shared, b.ReadOnlyInJobUnits, b.ReadOnlyInRun)
	}
	if sd := r.rt.Systemd; sd != nil {
		rep.UserManager = isolation.Manager(cut, sd.CanCutJobs, sd.CanCutRun)
	}
	return rep
}
