package relay

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/store"
)

const (
	// auditQueue bounds the audit entries waiting to be written; a call
	// beyond it goes unrecorded and is counted.
	auditQueue = 4096
	// auditBatch bounds the entries written in one transaction.
	auditBatch = 256
	// auditRetryFor bounds how long a batch the database failed is tried
	// again, from auditRetryFirst doubling to auditRetryMost between
	// tries: a database restarting loses none of the log.
	auditRetryFor   = 30 * time.Second
	auditRetryFirst = 50 * time.Millisecond
	auditRetryMost  = 2 * time.Second
)

// auditLog writes the audit log behind the calls: a call only queues its
// entry, so neither a slow database (another process holding the write
// lock for up to the busy timeout) nor a failing one slows or fails it.
// A writer goroutine runs only while entries wait, so an idle relay (or a
// closed one) holds none.
type auditLog struct {
	store store.State

	mu      sync.Mutex
	pending []store.AuditEntry
	// refusals counts requests refused without a valid client token, by
	// source and minute: however many arrive, they take one row each in
	// the database and never a place in pending.
	refusals map[refusalKey]int64
	writing  bool
	idle     chan struct{} // closed when the running writer has emptied pending and refusals

	// dropped counts calls that were never written: the queue was full or
	// the database refused them (refused requests' counts included).
	dropped atomic.Uint64
}

// openAudit returns the relay's audit log, pruned of what aged out while
// the relay was not running.
func openAudit(store store.State) (*auditLog, error) {
	if err := store.AppendAudit(nil, time.Now()); err != nil {
		return nil, err
	}
	return &auditLog{store: store}, nil
}

// refusalKey is a source and a minute (its first instant, Unix
// nanoseconds).
type refusalKey struct {
	minute int64
	source string
}

// add queues e without blocking.
func (a *auditLog) add(e store.AuditEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) >= auditQueue {
		a.dropped.Add(1)
		return
	}
	a.pending = append(a.pending, e)
	a.startWriter()
}

// refuse counts a request from source refused at at without a valid
// client token. Past limits.AuditPendingRefusalSources waiting sources,
// new ones are counted together under no source, so memory stays bounded
// whatever the traffic.
func (a *auditLog) refuse(at time.Time, source string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := refusalKey{minute: at.Truncate(time.Minute).UnixNano(), source: source}
	if a.refusals == nil {
		a.refusals = map[refusalKey]int64{}
	}
	if _, ok := a.refusals[k]; !ok && len(a.refusals) >= limits.AuditPendingRefusalSources {
		k.source = ""
	}
	a.refusals[k]++
	a.startWriter()
}

// startWriter starts the writer unless it runs; a.mu is held.
func (a *auditLog) startWriter() {
	if !a.writing {
		a.writing = true
		a.idle = make(chan struct{})
		go a.write(a.idle)
	}
}

// write commits pending entries in batches, and the refusals counted
// meanwhile, until none wait. The newest entry's (or minute's) time is the
// log's clock for the age bound.
func (a *auditLog) write(idle chan struct{}) {
	defer close(idle)
	for {
		a.mu.Lock()
		n := min(len(a.pending), auditBatch)
		refusals := a.refusals
		if n == 0 && len(refusals) == 0 {
			a.writing = false
			a.pending = nil
			a.mu.Unlock()
			return
		}
		batch := slices.Clone(a.pending[:n])
		a.pending = slices.Delete(a.pending, 0, n)
		a.refusals = nil
		a.mu.Unlock()
		if n > 0 && retried(func() error { return a.store.AppendAudit(batch, batch[n-1].At) }) != nil {
			a.dropped.Add(uint64(n))
		}
		if len(refusals) > 0 {
			a.writeRefusals(refusals)
		}
	}
}

// writeRefusals commits refusal counts; the requests of counts the
// database refused are counted as dropped.
func (a *auditLog) writeRefusals(refusals map[refusalKey]int64) {
	counts := make([]store.RefusalCount, 0, len(refusals))
	var newest time.Time
	var total int64
	for k, n := range refusals {
		c := store.RefusalCount{Minute: time.Unix(0, k.minute).UTC(), Source: k.source, Count: n}
		counts = append(counts, c)
		if c.Minute.After(newest) {
			newest = c.Minute
		}
		total += n
	}
	if retried(func() error { return a.store.AddRefusalCounts(counts, newest) }) != nil {
		a.dropped.Add(uint64(total))
	}
}

// retried runs write until it succeeds, refuses what it was given
// (invalid_argument: trying again cannot help), or auditRetryFor has
// passed, and returns its last error.
func retried(write func() error) error {
	deadline := time.Now().Add(auditRetryFor)
	for wait := auditRetryFirst; ; wait = min(2*wait, auditRetryMost) {
		err := write()
		if err == nil || errcode.Is(err, errcode.InvalidArgument) || time.Now().Add(wait).After(deadline) {
			return err
		}
		time.Sleep(wait)
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
