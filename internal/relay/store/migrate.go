package store

import (
	"context"
	"strings"

	"github.com/commandcore/commandcore/internal/errcode"
)

// copied are the tables Migrate copies and their columns, in an order
// that keeps each table's own order (the tokens' insertion order breaks
// ties in Tokens; the audit keeps its sequence numbers). Replicas and
// links are not copied: no relay runs on the new state yet; nor are panel
// sessions, sign-in codes and secret prompts: an admin signs in again, on
// the new state, and a call waiting for secret input waits on the old;
// nor are OAuth authorization requests and codes, which live a minute, nor
// sign-ins under way.
var copied = []struct{ table, columns, order string }{
	{"settings", "key, value", "key"},
	{"enroll_codes", "hash, name, created_at, expires_at, used_at", "hash"},
	{"devices", "id, name, token_hash, secret, enrolled_at, last_seen, standing, standing_at, agent_version, update_offer, agent_binary, user_manager", "id"},
	{"tokens", "id, name, secret_hash, devices, tools, created_at, expires_at, revoked_at, principal, kind, client_id, client_name, resource, admin", "rowid"},
	{"oauth_clients", "id, name, redirect_uris, created_at, used_at", "id"},
	{"oauth_tokens", "hash, token_id, kind, expires_at, spent_at", "hash"},
	{"token_use", "token_id, at", "token_id"},
	{"retired_device_tokens", "hash, device_id, retired_at", "hash"},
	{"audit", auditColumns, "seq"},
	{"audit_refusals", "seq, minute, source, count", "seq"},
	{"admins", "name, created_at, revoked_at", "name"},
	{"passkeys", "id, admin, credential, created_at, used_at", "id"},
}

// MigrateCounts says how many rows of each table Migrate copied.
type MigrateCounts map[string]int

// Migrate copies the whole relay state of from into to, which must hold
// none yet (no device, token or grant key), in one transaction: devices
// keep their credentials and standings, tokens their secrets and scopes,
// the grant key and the audit log stay as they were. It is how a single
// relay moves from its SQLite file to PostgreSQL.
func Migrate(from, to *Store) (MigrateCounts, error) {
	counts := MigrateCounts{}
	err := to.inTx(func(ctx context.Context, tx *txn) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM devices) + (SELECT count(*) FROM tokens) + (SELECT count(*) FROM settings)`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return errcode.New(errcode.AlreadyExists, "the destination already holds relay state; migrate into an empty database")
		}
		for _, c := range copied {
			rows, err := copyTable(ctx, from, tx, c.table, c.columns, c.order)
			if err != nil {
				return err
			}
			counts[c.table] = rows
		}
		if to.db.engine == enginePostgres {
			// Explicit sequence numbers leave the identity behind them.
			for _, table := range []string{"audit", "audit_refusals"} {
				if _, err := tx.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence('`+table+`', 'seq'), max(seq)) FROM `+table+` HAVING max(seq) IS NOT NULL`); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return counts, nil
}

// copyTable copies every row of table's columns from from into tx.
func copyTable(ctx context.Context, from *Store, tx *txn, table, columns, order string) (int, error) {
	rows, err := from.db.QueryContext(ctx, `SELECT `+columns+` FROM `+table+` ORDER BY `+order)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := strings.Count(columns, ",") + 1
	insert := `INSERT INTO ` + table + `(` + columns + `) VALUES (?` + strings.Repeat(", ?", n-1) + `)`
	vals := make([]any, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	copiedRows := 0
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, insert, vals...); err != nil {
			return 0, err
		}
		copiedRows++
	}
	return copiedRows, rows.Err()
}
