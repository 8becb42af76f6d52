package relay

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/commandcore/commandcore/internal/relaystate"
)

const (
	// auditQueue bounds the audit entries waiting to be written; a call
	// beyond it goes unrecorded and is counted.
	auditQueue = 4096
	// auditBatch bounds the entries written in one transaction.
	auditBatch = 256
)

// auditLog writes the audit log behind the calls: a call only queues its
// entry, so neither a slow database (another process holding the write
// lock for up to the busy timeout) nor a failing one slows or fails it.
// A writer goroutine runs only while entries wait, so an idle relay (or a
// closed one) holds none.
type auditLog struct {
	store relaystate.State

	mu      sync.Mutex
	pending []relaystate.AuditEntry
	writing bool
	idle    chan struct{} // closed when the running writer has emptied pending

	// dropped counts entries that were never written: the queue was full or
	// the database refused them.
	dropped atomic.Uint64
}

// openAudit returns the relay's audit log, pruned of what aged out while
// the relay was not running.
func openAudit(store relaystate.State) (*auditLog, error) {
	if err := store.AppendAudit(nil, time.Now()); err != nil {
		return nil, err
	}
	return &auditLog{store: store}, nil
}

// add queues e without blocking.
func (a *auditLog) add(e relaystate.AuditEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) >= auditQueue {
		a.dropped.Add(1)
		return
	}
	a.pending = append(a.pending, e)
	if !a.writing {
		a.writing = true
		a.idle = make(chan struct{})
		go a.write(a.idle)
	}
}

// write commits pending entries in batches until none wait. The newest
// entry's time is the log's clock for the age bound.
func (a *auditLog) write(idle chan struct{}) {
	defer close(idle)
	for {
		a.mu.Lock()
		n := min(len(a.pending), auditBatch)
		if n == 0 {
			a.writing = false
			a.pending = nil
			a.mu.Unlock()
			return
		}
		batch := slices.Clone(a.pending[:n])
		a.pending = slices.Delete(a.pending, 0, n)
		a.mu.Unlock()
		if a.store.AppendAudit(batch, batch[n-1].At) != nil {
			a.dropped.Add(uint64(n))
		}
	}
}

// flush waits until every entry queued before the call is written (or
// counted as dropped).
func (a *auditLog) flush() {
	a.mu.Lock()
	idle, writing := a.idle, a.writing
	a.mu.Unlock()
	if writing {
		<-idle
	}
}
