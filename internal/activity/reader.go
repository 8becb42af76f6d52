package activity

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
)

// readTimeout bounds one read query.
const readTimeout = 10 * time.Second

// Reader reads the journal without writing to it: the database is opened
// read-only, and reading is safe while the agent writes (WAL). Entries older
// than limits.JournalMaxAge are never returned, even before the writer has
// pruned them.
type Reader struct {
	db  *sql.DB
	now func() time.Time
}

// OpenReader opens the journal at path read-only. A journal that does not
// exist yet is an error satisfying errors.Is(err, fs.ErrNotExist).
func OpenReader(path string) (*Reader, error) { return openReader(path, time.Now) }

func openReader(path string, now func() time.Time) (*Reader, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("activity: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("activity: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("activity: journal is not a regular file: %w", fs.ErrInvalid)
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS))
	q.Add("_pragma", "query_only(1)")
	db, err := sql.Open("sqlite", dsn(abs, q))
	if err != nil {
		return nil, fmt.Errorf("activity: %w", err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	r := &Reader{db: db, now: now}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	var version int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		db.Close()
		return nil, fmt.Errorf("activity: open journal: %w", err)
	}
	if version < SchemaVersion {
		// Created but not yet initialised: an empty journal.
		db.Close()
		return nil, fmt.Errorf("activity: journal not initialised: %w", fs.ErrNotExist)
	}
	return r, nil
}

// Close closes the reader.
func (r *Reader) Close() error {
	if r == nil || r.db == nil {
		return nil
	}
	return r.db.Close()
}

func (r *Reader) where(errorsOnly bool) string {
	w := `ts >= ?`
	if errorsOnly {
		w += ` AND ` + errorsOnlySQL
	}
	return w
}

func (r *Reader) cutoff() int64 { return r.now().Add(-limits.JournalMaxAge).UnixNano() }

// Last returns the last n entries, oldest first. errorsOnly keeps failure
// and recovery entries (outcome failed, or kind reconcile).
func (r *Reader) Last(n int, errorsOnly bool) ([]Event, error) {
	if r == nil || r.db == nil {
		return nil, errClosed
	}
	if n <= 0 {
		return nil, nil
	}
	n = min(n, limits.JournalMaxEntries)
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	rows, err := r.db.QueryContext(ctx, `SELECT `+columns+` FROM
		(SELECT `+columns+` FROM events WHERE `+r.where(errorsOnly)+` ORDER BY id DESC LIMIT ?)
		ORDER BY id ASC`, r.cutoff(), n)
	if err != nil {
		return nil, fmt.Errorf("activity: read journal: %w", err)
	}
	return scanEvents(rows)
}

// Since returns up to limit entries with an ID above afterID, oldest first:
// the follow loop of `commandcore activity` polls it with the last ID it
// printed. A limit of zero or less means limits.JournalMaxEntries.
func (r *Reader) Since(afterID int64, errorsOnly bool, limit int) ([]Event, error) {
	if r == nil || r.db == nil {
		return nil, errClosed
	}
	if limit <= 0 || limit > limits.JournalMaxEntries {
		limit = limits.JournalMaxEntries
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	rows, err := r.db.QueryContext(ctx, `SELECT `+columns+` FROM events
		WHERE id > ? AND `+r.where(errorsOnly)+` ORDER BY id ASC LIMIT ?`, afterID, r.cutoff(), limit)
	if err != nil {
		return nil, fmt.Errorf("activity: read journal: %w", err)
	}
	return scanEvents(rows)
}

// Cursor returns the highest ID in the journal (0 when empty): following
// from it shows only entries written afterwards.
func (r *Reader) Cursor() (int64, error) {
	if r == nil || r.db == nil {
		return 0, errClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	var id int64
	if err := r.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM events`).Scan(&id); err != nil {
		return 0, fmt.Errorf("activity: read journal: %w", err)
	}
	return id, nil
}
