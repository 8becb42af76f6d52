package store

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"
)

// engine is the SQL database a Store runs on: SQLite in the relay's state
// directory (the embedded default) or PostgreSQL (shared by replicas).
// Every query is written once, with ? placeholders, in SQL both accept;
// on PostgreSQL it is rebound to $1, $2, … once and remembered.
type engine int

const (
	engineSQLite engine = iota
	enginePostgres
)

// db is a Store's connection pool on its engine.
type db struct {
	*sql.DB
	engine  engine
	rebound sync.Map // query text -> its PostgreSQL form
}

// q is query as the engine takes it.
func (d *db) q(query string) string {
	if d.engine != enginePostgres {
		return query
	}
	if r, ok := d.rebound.Load(query); ok {
		return r.(string)
	}
	r := rebind(query)
	d.rebound.Store(query, r)
	return r
}

func (d *db) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return d.DB.ExecContext(ctx, d.q(query), args...)
}

func (d *db) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return d.DB.QueryContext(ctx, d.q(query), args...)
}

func (d *db) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return d.DB.QueryRowContext(ctx, d.q(query), args...)
}

// Exec and QueryRow are for the tests, which poke at the database
// directly.
func (d *db) Exec(query string, args ...any) (sql.Result, error) {
	return d.ExecContext(context.Background(), query, args...)
}

func (d *db) QueryRow(query string, args ...any) *sql.Row {
	return d.QueryRowContext(context.Background(), query, args...)
}

// begin starts a write transaction. On SQLite every transaction takes the
// write lock at BEGIN (the connection's _txlock), so transactions are
// serial; on PostgreSQL it is SERIALIZABLE, which gives the same outcome
// or fails with a serialization error that inTx retries.
func (d *db) begin(ctx context.Context) (*txn, error) {
	var opts *sql.TxOptions
	if d.engine == enginePostgres {
		opts = &sql.TxOptions{Isolation: sql.LevelSerializable}
	}
	tx, err := d.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &txn{Tx: tx, d: d}, nil
}

// txn is a transaction whose queries are rebound like db's.
type txn struct {
	*sql.Tx
	d *db
}

func (t *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.Tx.ExecContext(ctx, t.d.q(query), args...)
}

func (t *txn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.Tx.QueryRowContext(ctx, t.d.q(query), args...)
}

func (t *txn) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return t.Tx.PrepareContext(ctx, t.d.q(query))
}

// jsonList ends query with a subquery of the strings of a JSON array
// bound to its last placeholder.
func (d *db) jsonList(query string) string {
	if d.engine == enginePostgres {
		return query + `(SELECT json_array_elements_text(?::json))`
	}
	return query + `(SELECT value FROM json_each(?))`
}

// rebind numbers the ? placeholders of query outside quoted text.
func rebind(query string) string {
	var b strings.Builder
	b.Grow(len(query) + 16)
	n, quote := 0, byte(0)
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
