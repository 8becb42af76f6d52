package activity

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/commandcore/commandcore/internal/limits"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// SchemaVersion is the journal's schema version (PRAGMA user_version).
// Columns only ever grow.
const SchemaVersion = 1

const (
	// queueSize bounds the events waiting for the writer; beyond it Record
	// drops and counts.
	queueSize = 1024
	// maxBatch bounds the events written in one transaction.
	maxBatch = 256
	// pruneEvery and pruneInterval say how often the writer prunes: after
	// this many inserted events, or when this much (journal clock) time has
	// passed since the last prune at the next write. pruneTick prunes an idle
	// journal.
	pruneEvery    = 256
	pruneInterval = time.Minute
	pruneTick     = 10 * time.Minute
	// writeTimeout bounds one batch or prune; busyTimeoutMS bounds waiting
	// for another connection's lock inside it.
	writeTimeout  = 10 * time.Second
	busyTimeoutMS = 5000
	// closeTimeout bounds how long Close waits for the final flush.
	closeTimeout = 3 * time.Second
	// walSizeLimit bounds the -wal file left after a checkpoint.
	walSizeLimit = 4 << 20
)

const schema = `
CREATE TABLE IF NOT EXISTS events (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	ts          INTEGER NOT NULL,
	kind        TEXT    NOT NULL,
	tool        TEXT    NOT NULL DEFAULT '',
	job_id      TEXT    NOT NULL DEFAULT '',
	phase       TEXT    NOT NULL DEFAULT '',
	outcome     TEXT    NOT NULL DEFAULT '',
	duration_ms INTEGER NOT NULL DEFAULT 0,
	error_code  TEXT    NOT NULL DEFAULT '',
	state       TEXT    NOT NULL DEFAULT '',
	reason      TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_ts ON events(ts);
`

const columns = `id, ts, kind, tool, job_id, phase, outcome, duration_ms, error_code, state, reason`

// Stats counts what happened to recorded events. Every event passed to
// Record ends up in exactly one counter once the journal is closed.
type Stats struct {
	// Recorded events were committed to the database.
	Recorded uint64 `json:"recorded"`
	// Dropped events were refused because the queue was full or the journal
	// was closed.
	Dropped uint64 `json:"dropped"`
	// WriteFailures are events whose write failed (read-only or full
	// database, I/O error, corruption).
	WriteFailures uint64 `json:"write_failures"`
}

// Journal is the writing side of the activity journal. One agent process
// holds one. A nil *Journal is valid: Record, Stats and Close do nothing, so
// a caller that failed to open one needs no checks.
type Journal struct {
	db  *sql.DB
	now func() time.Time
	// insert writes one batch; a test seam for failures SQLite cannot be
	// made to produce on demand.
	insert func(ctx context.Context, batch []Event) error

	mu     sync.RWMutex // guards closed against Record's send
	closed bool
	ch     chan Event
	flushc chan chan struct{}
	quit   chan struct{}
	done   chan struct{}

	recorded, dropped, failures atomic.Uint64

	echo echo

	// Owned by the writer goroutine (and Open, before it starts).
	sincePrune int
	lastPrune  time.Time
}

// options are the unexported knobs of openJournal (tests).
type options struct {
	now func() time.Time
	// params are extra DSN query parameters (e.g. mode=ro, _pragma=...).
	params url.Values
	// noWriter keeps the writer goroutine from starting (tests that need a
	// full queue without racing the writer).
	noWriter bool
}

// Open opens (creating if needed) the journal database at path, owner-only
// (0600, directory 0700), in WAL mode, and prunes it. An error means the
// caller should run without a journal (a nil *Journal); it never leaves a
// goroutine behind. A read-only database opens: its writes are counted as
// failures.
func Open(path string) (*Journal, error) { return openJournal(path, options{}) }

func openJournal(path string, o options) (*Journal, error) {
	if o.now == nil {
		o.now = time.Now
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("activity: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("activity: %w", err)
	}
	// Create the file owner-only before SQLite sees it: SQLite gives the
	// -wal and -shm files the database file's permissions.
	f, err := os.OpenFile(abs, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("activity: %w", err)
	}
	f.Close()
	tightenModes(abs)

	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
	q.Set("_txlock", "immediate")
	for k, vs := range o.params {
		for _, v := range vs {
			q.Add(k, v)
		}
	}
	db, err := sql.Open("sqlite", dsn(abs, q))
	if err != nil {
		return nil, fmt.Errorf("activity: %w", err)
	}
	// One connection: the writer is the only user, and per-connection
	// pragmas then hold for every statement.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)

	if err := initSchema(db); err != nil {
		db.Close()
		return nil, err
	}
	tightenModes(abs)

	j := &Journal{
		db:     db,
		now:    o.now,
		ch:     make(chan Event, queueSize),
		flushc: make(chan chan struct{}),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	j.insert = j.insertBatch
	if o.noWriter {
		close(j.done)
	} else {
		go j.run()
	}
	return j, nil
}

// dsn builds a file: URI for path (escaping '?', '#' and '%') with query q.
func dsn(path string, q url.Values) string {
	u := url.URL{Scheme: "file", Path: path}
	return u.String() + "?" + q.Encode()
}

// initSchema checks the database and creates the schema when it is new.
func initSchema(db *sql.DB) error {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("activity: open journal: %w", err)
	}
	var check string
	if err := db.QueryRowContext(ctx, "PRAGMA quick_check(1)").Scan(&check); err != nil {
		return fmt.Errorf("activity: check journal: %w", err)
	}
	if check != "ok" {
		return errors.New("activity: journal database is corrupt")
	}
	var version int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("activity: read schema version: %w", err)
	}
	if version >= SchemaVersion {
		// Existing journal (possibly from a newer version, whose columns only
		// grew): nothing to write, so a read-only database opens too.
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("activity: create schema: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("activity: create schema: %w", err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion)); err != nil {
		return fmt.Errorf("activity: create schema: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("activity: create schema: %w", err)
	}
	return nil
}

// tightenModes removes group and other permission bits from the database
// and its -wal and -shm files. It never widens a mode (an owner may make the
// journal read-only on purpose).
func tightenModes(path string) {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
			os.Chmod(p, fi.Mode().Perm()&0o700)
		}
	}
}

// Record queues e for the journal. It never fails, never blocks and does no
// disk I/O: the event is sanitised here (so no caller string is retained)
// and written later by the journal's writer; when the queue is full or the
// journal is closed it is dropped and counted. Safe on a nil *Journal and
// from any goroutine.
func (j *Journal) Record(e Event) {
	if j == nil {
		return
	}
	e = sanitize(e)
	e.ID = 0
	if e.Time.IsZero() {
		e.Time = j.now().UTC()
	}
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.closed {
		j.dropped.Add(1)
		return
	}
	select {
	case j.ch <- e:
	default:
		j.dropped.Add(1)
	}
}

// Stats returns the journal's counters. Zero on a nil *Journal.
func (j *Journal) Stats() Stats {
	if j == nil {
		return Stats{}
	}
	return Stats{Recorded: j.recorded.Load(), Dropped: j.dropped.Load(), WriteFailures: j.failures.Load()}
}

// Close writes what is queued, prunes, and closes the database, waiting at
// most a few seconds; events recorded afterwards are dropped. Safe on a nil
// *Journal and more than once.
func (j *Journal) Close() error {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	close(j.quit)
	select {
	case <-j.done:
	case <-time.After(closeTimeout):
		// The writer is stuck in the database; leave it rather than hold up
		// the agent's shutdown.
		return errors.New("activity: timed out flushing the journal")
	}
	// Anything left was queued for a writer that never ran (tests).
	for n := len(j.ch); n > 0; n-- {
		<-j.ch
		j.dropped.Add(1)
	}
	return j.db.Close()
}

// flush waits until every event queued before the call has been written (or
// failed). For tests.
func (j *Journal) flush() {
	reply := make(chan struct{})
	select {
	case j.flushc <- reply:
		<-reply
	case <-j.done:
	}
}

// run is the writer goroutine.
func (j *Journal) run() {
	defer close(j.done)
	// The first prune is the writer's, not Open's: another agent frozen
	// inside a write holds the lock for up to busyTimeoutMS, and an agent
	// starting beside it must not wait that out before it links.
	j.prune()
	tick := time.NewTicker(pruneTick)
	defer tick.Stop()
	batch := make([]Event, 0, maxBatch)
	for {
		select {
		case e := <-j.ch:
			batch = j.fill(append(batch[:0], e))
			j.write(batch)
		case reply := <-j.flushc:
			j.drain(batch)
			close(reply)
		case <-tick.C:
			j.prune()
		case <-j.quit:
			j.drain(batch)
			j.prune()
			return
		}
	}
}

// fill adds queued events to batch without waiting, up to maxBatch.
func (j *Journal) fill(batch []Event) []Event {
	for len(batch) < maxBatch {
		select {
		case e := <-j.ch:
			batch = append(batch, e)
		default:
			return batch
		}
	}
	return batch
}

// drain writes everything queued.
func (j *Journal) drain(batch []Event) {
	for {
		batch = j.fill(batch[:0])
		if len(batch) == 0 {
			return
		}
		j.write(batch)
	}
}

// write commits one batch, counting the outcome, and prunes when due.
func (j *Journal) write(batch []Event) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	err := j.insert(ctx, batch)
	cancel()
	j.print(batch)
	if err != nil {
		j.failures.Add(uint64(len(batch)))
		return
	}
	j.recorded.Add(uint64(len(batch)))
	j.sincePrune += len(batch)
	if j.sincePrune >= pruneEvery || j.now().Sub(j.lastPrune) >= pruneInterval {
		j.prune()
	}
}

// insertBatch is the real insert: one transaction for the batch.
func (j *Journal) insertBatch(ctx context.Context, batch []Event) error {
	tx, err := j.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO events
		(ts, kind, tool, job_id, phase, outcome, duration_ms, error_code, state, reason)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, e := range batch {
		if _, err := stmt.ExecContext(ctx, e.Time.UnixNano(), string(e.Kind), string(e.Tool), e.JobID,
			string(e.Phase), string(e.Outcome), e.DurationMS, e.ErrorCode, e.State, string(e.Reason)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// prune deletes entries older than limits.JournalMaxAge and all but the
// newest limits.JournalMaxEntries. Failures are ignored (retried later).
func (j *Journal) prune() {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	now := j.now()
	tx, err := j.db.BeginTx(ctx, nil)
	if err != nil {
		return
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM events WHERE ts < ?`, now.Add(-limits.JournalMaxAge).UnixNano()); err != nil {
		return
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM events WHERE id <=
		(SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET ?)`, limits.JournalMaxEntries); err != nil {
		return
	}
	if tx.Commit() == nil {
		j.sincePrune = 0
		j.lastPrune = now
	}
}

// scanEvents reads rows of `columns` into sanitised events.
func scanEvents(rows *sql.Rows) ([]Event, error) {
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var (
			e                                                   Event
			ts                                                  int64
			kind, tool, phase, outcome, code, state, reason, id string
		)
		if err := rows.Scan(&e.ID, &ts, &kind, &tool, &id, &phase, &outcome, &e.DurationMS, &code, &state, &reason); err != nil {
			return nil, err
		}
		e.Time = time.Unix(0, ts).UTC()
		e.Kind, e.Tool, e.JobID, e.Phase = Kind(kind), Tool(tool), id, Phase(phase)
		e.Outcome, e.ErrorCode, e.State, e.Reason = Outcome(outcome), code, state, Reason(reason)
		// Whatever is on disk, only allowlisted words leave the package.
		out = append(out, sanitize(e))
	}
	return out, rows.Err()
}
