// Package store is the reference relay's persistent state (README): a
// SQLite database (modernc.org/sqlite, WAL) in the relay's state directory
// holding enrolled devices, one-time enrollment codes, client tokens and the
// grant signing key.
//
// The database is shared: `commandcore relay serve` and the relay's CLI
// commands (enroll-code, token create/list/revoke, devices) open it at the
// same time from different processes. Every operation reads the database
// (nothing is cached but the immutable grant key), so a token revoked by one
// process is refused by the other on its next operation.
//
// Secrets the relay only has to recognise (enrollment codes, device tokens,
// client tokens) are stored as SHA-256 hashes and compared in constant time.
// The one exception is each device's heartbeat secret, which the relay needs
// in the clear to verify the device's MACs.
//
// Errors are *errcode.Error values with content-free messages: they never
// quote a code, token, name or path. A database failure is an Internal error
// whose cause is kept only for local diagnosis (errors.Unwrap).
package store

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// File is the name of the relay's database in its state directory.
const File = "relay.db"

// SchemaVersion is the database's schema version (PRAGMA user_version):
// the number of migrations applied. Columns and tables only ever grow.
const SchemaVersion = 16

const (
	// busyTimeoutMS bounds how long a statement waits for another
	// connection's (or process's) write lock.
	busyTimeoutMS = 5000
	// opTimeout bounds one store operation.
	opTimeout = 10 * time.Second
	// walSizeLimit bounds the -wal file left after a checkpoint.
	walSizeLimit = 4 << 20
	// maxConns bounds the connections one Store holds.
	maxConns = 8
	// settingGrantSeed is the settings key of the grant key's ed25519 seed.
	settingGrantSeed = "grant_key_seed"
	// settingClusterKey is the settings key of the cluster key.
	settingClusterKey = "cluster_key"
	// settingPublicURL is the settings key of the relay's public URL.
	settingPublicURL = "public_url"
	// ClusterKeyBytes is the size of the cluster key.
	ClusterKeyBytes = 32
)

const schema = `
CREATE TABLE IF NOT EXISTS settings (
	key   TEXT PRIMARY KEY,
	value BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS enroll_codes (
	hash       BLOB    PRIMARY KEY,
	name       TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	used_at    INTEGER
);
CREATE INDEX IF NOT EXISTS enroll_codes_expires ON enroll_codes(expires_at);
CREATE TABLE IF NOT EXISTS devices (
	id          TEXT    PRIMARY KEY,
	name        TEXT    NOT NULL UNIQUE,
	token_hash  BLOB    NOT NULL UNIQUE,
	secret      BLOB    NOT NULL,
	enrolled_at INTEGER NOT NULL,
	last_seen   INTEGER,
	connected   INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS tokens (
	id          TEXT    PRIMARY KEY,
	name        TEXT    NOT NULL,
	secret_hash BLOB    NOT NULL,
	devices     TEXT    NOT NULL,
	tools       TEXT    NOT NULL,
	created_at  INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL,
	revoked_at  INTEGER
);
CREATE INDEX IF NOT EXISTS tokens_created ON tokens(created_at);
`

// schemaV2 adds trust: a token's principal (empty: the token's own ID), a
// device's standing (active, compromised, revoked) and its rotated-away
// tokens, whose return reveals a copy, and the audit log of client calls.
const schemaV2 = `
ALTER TABLE tokens ADD COLUMN principal TEXT NOT NULL DEFAULT '';
ALTER TABLE devices ADD COLUMN standing TEXT NOT NULL DEFAULT 'active';
ALTER TABLE devices ADD COLUMN standing_at INTEGER;
CREATE TABLE IF NOT EXISTS retired_device_tokens (
	hash       BLOB    PRIMARY KEY,
	device_id  TEXT    NOT NULL,
	retired_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS retired_device_tokens_device ON retired_device_tokens(device_id);
CREATE TABLE IF NOT EXISTS audit (
	seq         INTEGER PRIMARY KEY AUTOINCREMENT,
	at          INTEGER NOT NULL,
	principal   TEXT    NOT NULL,
	token_id    TEXT    NOT NULL,
	device      TEXT    NOT NULL,
	tool        TEXT    NOT NULL,
	outcome     TEXT    NOT NULL,
	code        TEXT    NOT NULL DEFAULT '',
	duration_us INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_at ON audit(at);
`

// schemaV3 adds the standing-change counter (StandingChanges): triggers
// bump it whenever a device row comes or goes or its ID or standing
// changes, whoever writes (this relay, the CLI in another process, the
// sqlite3 shell), so a relay that finds it unchanged knows every device's
// standing is what it last read without reading them.
const schemaV3 = `
CREATE TABLE IF NOT EXISTS standing_changes (
	one INTEGER PRIMARY KEY CHECK (one = 1),
	n   INTEGER NOT NULL
);
INSERT OR IGNORE INTO standing_changes(one, n) VALUES (1, 0);
CREATE TRIGGER IF NOT EXISTS devices_standing_insert AFTER INSERT ON devices
	BEGIN UPDATE standing_changes SET n = n + 1; END;
CREATE TRIGGER IF NOT EXISTS devices_standing_delete AFTER DELETE ON devices
	BEGIN UPDATE standing_changes SET n = n + 1; END;
CREATE TRIGGER IF NOT EXISTS devices_standing_update AFTER UPDATE OF id, standing ON devices
	BEGIN UPDATE standing_changes SET n = n + 1; END;
`

// schemaV4 adds the token-change counter (TokenChanges): triggers bump it
// whenever a token row changes or goes, whoever writes, so a relay that
// finds it unchanged knows every token it checked is as it read it. A new
// token changes no other token's validity and leaves it alone.
const schemaV4 = `
CREATE TABLE IF NOT EXISTS token_changes (
	one INTEGER PRIMARY KEY CHECK (one = 1),
	n   INTEGER NOT NULL
);
INSERT OR IGNORE INTO token_changes(one, n) VALUES (1, 0);
CREATE TRIGGER IF NOT EXISTS tokens_change_update AFTER UPDATE ON tokens
	BEGIN UPDATE token_changes SET n = n + 1; END;
CREATE TRIGGER IF NOT EXISTS tokens_change_delete AFTER DELETE ON tokens
	BEGIN UPDATE token_changes SET n = n + 1; END;
`

// schemaV5 adds the counts of requests refused without a valid client
// token, one row per source and minute (RefusalCount), apart from the
// audit of calls so that no number of them can push a call out.
const schemaV5 = `
CREATE TABLE IF NOT EXISTS audit_refusals (
	seq    INTEGER PRIMARY KEY AUTOINCREMENT,
	minute INTEGER NOT NULL,
	source TEXT    NOT NULL,
	count  INTEGER NOT NULL,
	UNIQUE (minute, source)
);
`

// schemaV6 adds the relay replicas serving from this state (Replica) and,
// on each device, the replica holding its link.
const schemaV6 = `
CREATE TABLE IF NOT EXISTS replicas (
	id          TEXT    PRIMARY KEY,
	name        TEXT    NOT NULL,
	address     TEXT    NOT NULL,
	nats        INTEGER NOT NULL,
	boot_id     TEXT    NOT NULL,
	pid         INTEGER NOT NULL,
	start_ticks INTEGER NOT NULL,
	started_at  INTEGER NOT NULL,
	seen_at     INTEGER NOT NULL
);
ALTER TABLE devices ADD COLUMN held_by TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS devices_held_by ON devices(held_by);
`

// schemaV7 adds the panel: its admins, their one-time sign-in codes and
// their sessions (secrets as hashes, as everywhere), and on each device
// the agent version and time of its current link, which the panel shows.
const schemaV7 = `
CREATE TABLE IF NOT EXISTS admins (
	name       TEXT    PRIMARY KEY,
	created_at INTEGER NOT NULL,
	revoked_at INTEGER
);
CREATE TABLE IF NOT EXISTS admin_codes (
	hash       BLOB    PRIMARY KEY,
	admin      TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	used_at    INTEGER
);
CREATE INDEX IF NOT EXISTS admin_codes_admin ON admin_codes(admin);
CREATE TABLE IF NOT EXISTS panel_sessions (
	hash       BLOB    PRIMARY KEY,
	admin      TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	seen_at    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS panel_sessions_admin ON panel_sessions(admin);
ALTER TABLE devices ADD COLUMN agent_version TEXT NOT NULL DEFAULT '';
ALTER TABLE devices ADD COLUMN linked_at INTEGER;
ALTER TABLE replicas ADD COLUMN panel TEXT NOT NULL DEFAULT '';
`

// schemaV8 adds secret prompts: process.input's secret_prompt waiting
// for a person at the panel (SecretPrompt). The ID is stored as a hash,
// the input never.
const schemaV8 = `
CREATE TABLE IF NOT EXISTS secret_prompts (
	hash       BLOB    PRIMARY KEY,
	token_id   TEXT    NOT NULL,
	principal  TEXT    NOT NULL,
	device_id  TEXT    NOT NULL,
	process_id TEXT    NOT NULL,
	prompt     TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	state      TEXT    NOT NULL,
	result     BLOB
);
CREATE INDEX IF NOT EXISTS secret_prompts_expires ON secret_prompts(expires_at);
`

// schemaV9 records, per device, whether the agent of its current link
// checks a grant's call digest (authz.BindsCallsCapability), so that every
// replica minting a grant for it binds the grant to its call.
const schemaV9 = `
ALTER TABLE devices ADD COLUMN binds_calls INTEGER NOT NULL DEFAULT 0;
`

// schemaV10 names, in an audit entry, the job its call was about, so the
// panel links the entry to the job.
const schemaV10 = `
ALTER TABLE audit ADD COLUMN job TEXT NOT NULL DEFAULT '';
`

// schemaV11 adds OAuth: a connection is a token of kind 'oauth' naming
// its client, the resource its tokens are for and who consented; the
// clients registered dynamically, the authorization requests waiting for
// consent, the codes and the access and refresh tokens are kept by hash;
// token_use is when each token was last used (its last audited call).
const schemaV11 = `
ALTER TABLE tokens ADD COLUMN kind TEXT NOT NULL DEFAULT 'static';
ALTER TABLE tokens ADD COLUMN client_id TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN client_name TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN resource TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN admin TEXT NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS oauth_clients (
	id            TEXT    PRIMARY KEY,
	name          TEXT    NOT NULL,
	redirect_uris TEXT    NOT NULL,
	created_at    INTEGER NOT NULL,
	used_at       INTEGER
);
CREATE INDEX IF NOT EXISTS oauth_clients_created ON oauth_clients(created_at);
CREATE TABLE IF NOT EXISTS oauth_requests (
	hash         BLOB    PRIMARY KEY,
	client_id    TEXT    NOT NULL,
	client_name  TEXT    NOT NULL,
	redirect_uri TEXT    NOT NULL,
	state        TEXT    NOT NULL,
	challenge    TEXT    NOT NULL,
	resource     TEXT    NOT NULL,
	scope        TEXT    NOT NULL,
	created_at   INTEGER NOT NULL,
	expires_at   INTEGER NOT NULL,
	answered_at  INTEGER
);
CREATE INDEX IF NOT EXISTS oauth_requests_expires ON oauth_requests(expires_at);
CREATE TABLE IF NOT EXISTS oauth_codes (
	hash         BLOB    PRIMARY KEY,
	client_id    TEXT    NOT NULL,
	client_name  TEXT    NOT NULL,
	redirect_uri TEXT    NOT NULL,
	challenge    TEXT    NOT NULL,
	resource     TEXT    NOT NULL,
	devices      TEXT    NOT NULL,
	tools        TEXT    NOT NULL,
	principal    TEXT    NOT NULL,
	ttl          INTEGER NOT NULL,
	admin        TEXT    NOT NULL,
	expires_at   INTEGER NOT NULL,
	used_at      INTEGER,
	token_id     TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS oauth_codes_expires ON oauth_codes(expires_at);
CREATE TABLE IF NOT EXISTS oauth_tokens (
	hash       BLOB    PRIMARY KEY,
	token_id   TEXT    NOT NULL,
	kind       TEXT    NOT NULL,
	expires_at INTEGER NOT NULL,
	spent_at   INTEGER
);
CREATE INDEX IF NOT EXISTS oauth_tokens_token ON oauth_tokens(token_id);
CREATE INDEX IF NOT EXISTS oauth_tokens_expires ON oauth_tokens(expires_at);
CREATE TABLE IF NOT EXISTS token_use (
	token_id TEXT    PRIMARY KEY,
	at       INTEGER NOT NULL
);
`

// schemaV12 adds the panel's other ways in: passkeys (WebAuthn
// credentials, each the library's record of it, by credential ID) and the
// state of a sign-in under way (an SSO redirect's state, nonce and PKCE
// verifier, a passkey ceremony's challenge), kept by the hash of the
// cookie that names it and taken once, so any replica finishes what
// another began.
const schemaV12 = `
CREATE TABLE IF NOT EXISTS passkeys (
	id         BLOB    PRIMARY KEY,
	admin      TEXT    NOT NULL,
	credential BLOB    NOT NULL,
	created_at INTEGER NOT NULL,
	used_at    INTEGER
);
CREATE INDEX IF NOT EXISTS passkeys_admin ON passkeys(admin);
CREATE TABLE IF NOT EXISTS signin_states (
	hash       BLOB    PRIMARY KEY,
	kind       TEXT    NOT NULL,
	data       BLOB    NOT NULL,
	expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS signin_states_expires ON signin_states(expires_at);
`

// schemaV13 adds agent updates: the version the relay holding a device's
// link offers it (empty when the agent runs what the relay serves, or
// updates are off), so relay devices shows an outdated agent.
const schemaV13 = `
ALTER TABLE devices ADD COLUMN update_offer TEXT NOT NULL DEFAULT '';
`

// schemaV14 adds a refresh token's grace: when it was accepted once more
// after its rotation (limits.OAuthRefreshGrace).
const schemaV14 = `
ALTER TABLE oauth_tokens ADD COLUMN regranted_at INTEGER;
`

// schemaV15 counts pending authorization requests per source, so that
// unauthenticated requests hold a bounded share of the state.
const schemaV15 = `
ALTER TABLE oauth_requests ADD COLUMN source TEXT NOT NULL DEFAULT '';
`

// schemaV16 adds what a link's agent said of how its jobs are kept from
// it (isolation.Report), for the panel's device page, and whether it takes
// numbered grants (authz.GrantSequenceCapability).
const schemaV16 = `
ALTER TABLE devices ADD COLUMN agent_binary TEXT NOT NULL DEFAULT '';
ALTER TABLE devices ADD COLUMN user_manager TEXT NOT NULL DEFAULT '';
ALTER TABLE devices ADD COLUMN numbers_grants INTEGER NOT NULL DEFAULT 0;
`

// migrations[i] takes a database from schema version i to i+1.
var migrations = []string{schema, schemaV2, schemaV3, schemaV4, schemaV5, schemaV6, schemaV7, schemaV8, schemaV9, schemaV10, schemaV11, schemaV12, schemaV13, schemaV14, schemaV15, schemaV16}

// Store is an open relay state database. It is safe for concurrent use by
// many goroutines, and several Stores (in one or several processes) may
// use the same state directory at once.
type Store struct {
	db *db

	keyMu sync.Mutex
	key   ed25519.PrivateKey // cached once loaded; it never changes

	audit auditBound
}

// Open opens (creating if needed) stateDir/relay.db: the directory is
// created 0700 and the file 0600 (an existing file, and its -wal and -shm
// files, lose any group and other permission bits); the database runs in
// WAL mode with a 5 s busy timeout and gets the schema on first use.
func Open(stateDir string) (*Store, error) {
	if stateDir == "" {
		return nil, errcode.New(errcode.InvalidArgument, "relay state directory is not set")
	}
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "cannot resolve the relay state directory")
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "cannot create the relay state directory")
	}
	path := filepath.Join(abs, File)
	// Create the file owner-only before SQLite sees it: SQLite gives the
	// -wal and -shm files the database file's permissions. O_NOFOLLOW
	// refuses a symlink planted in place of the database.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "cannot open the relay state database")
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "cannot open the relay state database")
	}
	if !fi.Mode().IsRegular() {
		return nil, errcode.New(errcode.Internal, "relay state database is not a regular file")
	}
	tightenModes(path)

	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
	// Every transaction takes the write lock at BEGIN, so two writers (in
	// this process or another) queue on the busy timeout instead of failing
	// with a stale snapshot.
	q.Set("_txlock", "immediate")
	u := url.URL{Scheme: "file", Path: path}
	pool, err := sql.Open("sqlite", u.String()+"?"+q.Encode())
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "cannot open the relay state database")
	}
	pool.SetMaxOpenConns(maxConns)
	pool.SetMaxIdleConns(maxConns)
	pool.SetConnMaxLifetime(0)
	pool.SetConnMaxIdleTime(time.Minute)

	if err := initSchema(pool); err != nil {
		pool.Close()
		return nil, err
	}
	tightenModes(path)
	return &Store{db: &db{DB: pool, engine: engineSQLite}}, nil
}

// Close closes the database. Using the Store afterwards fails.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return errcode.Wrap(errcode.Internal, err, "cannot close the relay state database")
	}
	return nil
}

// initSchema checks the database and creates the schema when it is new, or
// brings an older relay's schema up to date.
// Two processes opening a new database at once both run it; the write lock
// taken at BEGIN serialises them and the second finds the version set.
func initSchema(db *sql.DB) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return errcode.Wrap(errcode.Internal, err, "cannot open the relay state database")
	}
	var check string
	if err := db.QueryRowContext(ctx, "PRAGMA quick_check(1)").Scan(&check); err != nil {
		return errcode.Wrap(errcode.Internal, err, "cannot check the relay state database")
	}
	if check != "ok" {
		return errcode.New(errcode.Internal, "relay state database is corrupt")
	}
	version, err := userVersion(ctx, db)
	if err != nil {
		return err
	}
	if version > SchemaVersion {
		// Written by a newer relay: reading it as ours could lose what it
		// keeps that we do not know.
		return errcode.New(errcode.Internal, "relay state database has schema %d; this relay knows only %d", version, SchemaVersion)
	}
	if version == SchemaVersion {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return errcode.Wrap(errcode.Internal, err, "cannot create the relay state schema")
	}
	defer tx.Rollback()
	if version, err = userVersion(ctx, tx); err != nil || version >= SchemaVersion {
		return err
	}
	for _, m := range migrations[version:] {
		if _, err := tx.ExecContext(ctx, m); err != nil {
			return errcode.Wrap(errcode.Internal, err, "cannot create the relay state schema")
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion)); err != nil {
		return errcode.Wrap(errcode.Internal, err, "cannot create the relay state schema")
	}
	if err := tx.Commit(); err != nil {
		return errcode.Wrap(errcode.Internal, err, "cannot create the relay state schema")
	}
	return nil
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func userVersion(ctx context.Context, q queryer) (int, error) {
	var v int
	if err := q.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return 0, errcode.Wrap(errcode.Internal, err, "cannot read the relay state schema version")
	}
	return v, nil
}

// tightenModes removes group and other permission bits from the database
// and its -wal and -shm files.
func tightenModes(path string) {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
			os.Chmod(p, fi.Mode().Perm()&0o700)
		}
	}
}

// inTx runs fn in one write transaction (db.begin) and commits it when fn
// returns nil; a transaction PostgreSQL could not serialize with another
// runs again, up to txAttempts in all. An *errcode.Error from fn is returned as is; any
// other failure becomes an Internal error.
func (s *Store) inTx(fn func(ctx context.Context, tx *txn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		err := s.tryTx(ctx, fn)
		if err == nil {
			return nil
		}
		if !retryable(err) || attempt == txAttempts {
			return dbErr(err)
		}
		if err := backOff(ctx, attempt); err != nil {
			return dbErr(err)
		}
	}
}

func (s *Store) tryTx(ctx context.Context, fn func(ctx context.Context, tx *txn) error) error {
	tx, err := s.db.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	return tx.Commit()
}

// dbErr passes an *errcode.Error through and hides anything else behind a
// content-free Internal error.
func dbErr(err error) error {
	var e *errcode.Error
	if errors.As(err, &e) {
		return e
	}
	return errcode.Wrap(errcode.Internal, err, "relay state database error")
}

// GrantKey returns the relay's grant signing key, creating it on first use
// (an ed25519 seed of 32 random bytes kept in the settings table). Every
// Store on the same database returns the same key.
func (s *Store) GrantKey() (ed25519.PrivateKey, error) {
	s.keyMu.Lock()
	defer s.keyMu.Unlock()
	if s.key != nil {
		return s.key, nil
	}
	seed, err := s.secretSetting(settingGrantSeed, ed25519.SeedSize, "relay grant key")
	if err != nil {
		return nil, err
	}
	s.key = ed25519.NewKeyFromSeed(seed)
	return s.key, nil
}

// ClusterKey returns the key the replicas seal their messages to each
// other with, creating it on first use (ClusterKeyBytes random bytes in
// the settings table). Only the shared database holds it, so whoever
// reaches NATS alone can neither read nor forge those messages.
func (s *Store) ClusterKey() ([]byte, error) {
	return s.secretSetting(settingClusterKey, ClusterKeyBytes, "relay cluster key")
}

// SetPublicURL records u as the relay's public URL, the one devices and
// clients reach it by, as the relay last started gave it ("" clears it):
// the administration commands, which run without the relay's flags, make
// their install lines with it.
func (s *Store) SetPublicURL(u string) error {
	if len(u) > maxAuditText {
		return errcode.New(errcode.InvalidArgument, "the public URL is longer than %d bytes", maxAuditText)
	}
	return s.inTx(func(ctx context.Context, tx *txn) error {
		if u == "" {
			_, err := tx.ExecContext(ctx, `DELETE FROM settings WHERE key = ?`, settingPublicURL)
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO settings(key, value) VALUES (?, ?)
			ON CONFLICT(key) DO UPDATE SET value = excluded.value`, settingPublicURL, []byte(u))
		return err
	})
}

// PublicURL returns the relay's public URL as SetPublicURL last recorded
// it, or "" when none is.
func (s *Store) PublicURL() (string, error) {
	var value []byte
	err := s.inTx(func(ctx context.Context, tx *txn) error {
		err := tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, settingPublicURL).Scan(&value)
		if errors.Is(err, sql.ErrNoRows) {
			value = nil
			return nil
		}
		return err
	})
	if err != nil {
		return "", err
	}
	return string(value), nil
}

// secretSetting returns the random secret of size bytes kept under name,
// creating it on first use; concurrent first uses on one database agree,
// since the transaction that loses the insert retries and reads the
// winner's.
func (s *Store) secretSetting(name string, size int, what string) ([]byte, error) {
	var value []byte
	err := s.inTx(func(ctx context.Context, tx *txn) error {
		err := tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, name).Scan(&value)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		value = randomBytes(size)
		_, err = tx.ExecContext(ctx, `INSERT INTO settings(key, value) VALUES (?, ?)`, name, value)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(value) != size {
		return nil, errcode.New(errcode.Internal, "%s is corrupt", what)
	}
	return value, nil
}

// queryAll runs a query with args and scans every row.
func queryAll[T any](s *Store, query string, scan func(rowScanner) (*T, error), args ...any) ([]T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, dbErr(err)
		}
		out = append(out, *v)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(err)
	}
	return out, nil
}

// updateOne runs an UPDATE that must touch a row; notFound makes the error
// when none matched.
func (s *Store) updateOne(notFound func() error, query string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return dbErr(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return dbErr(err)
	}
	if n == 0 {
		return notFound()
	}
	return nil
}
