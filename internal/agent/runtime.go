package agent

import (
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/status"
)

// runtimeRecord is the agent's runtime record, written whenever what it
// says changes; the link reports from its own goroutine.
type runtimeRecord struct {
	path string
	mu   sync.Mutex
	rt   status.Runtime
}

func newRuntimeRecord(stateDir string, rt status.Runtime) *runtimeRecord {
	return &runtimeRecord{path: filepath.Join(stateDir, status.RuntimeFile), rt: rt}
}

func (r *runtimeRecord) write() error {
	if err := jobmeta.WriteAtomic(r.path, &r.rt); err != nil {
		return fmt.Errorf("write runtime record: %w", err)
	}
	return nil
}

// observe refreshes when the agent last looked at its connection.
func (r *runtimeRecord) observe() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rt.Connection.ObservedAt = time.Now().UTC()
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
