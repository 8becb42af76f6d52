package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// Passkey is a WebAuthn credential an admin registered. Credential is the
// panel's own record of it (public key, signature counter, flags), which
// the state keeps whole and does not read.
type Passkey struct {
	ID         []byte
	Admin      string
	Credential []byte
	CreatedAt  time.Time
	UsedAt     *time.Time
}

const (
	// maxPasskeyIDBytes bounds a credential ID (WebAuthn's own bound).
	maxPasskeyIDBytes = 1023
	// maxSignInKindBytes bounds the name of a sign-in state's kind.
	maxSignInKindBytes = 32
)

func errNoPasskey() error { return errcode.New(errcode.NotFound, "no such passkey") }

// openSession opens a new session for admin in tx, ending the sessions
// that have run out, and returns its secret.
func openSession(ctx context.Context, tx *txn, admin string, now time.Time) (string, error) {
	if _, err := tx.ExecContext(ctx, `DELETE FROM panel_sessions WHERE seen_at < ? OR created_at < ?`,
		now.Add(-limits.PanelSessionIdle).UnixNano(), now.Add(-limits.PanelSessionMax).UnixNano()); err != nil {
		return "", err
	}
	session := sessionPrefix + randomB64()
	_, err := tx.ExecContext(ctx, `INSERT INTO panel_sessions(hash, admin, created_at, seen_at) VALUES (?, ?, ?, ?)`,
		hashSecret(session), admin, now.UnixNano(), now.UnixNano())
	return session, err
}

// SSOSignIn opens a session for an admin the team's identity provider
// vouched for, making them an admin on their first sign-in. A revoked
// admin stays revoked: only `relay admin create` brings them back. Every
// refusal is the sign-in codes' PermissionDenied.
func (s *Store) SSOSignIn(admin string, now time.Time) (string, error) {
	if !ValidAdminName(admin) {
		return "", errSignIn()
	}
	if err := checkNow(now); err != nil {
		return "", err
	}
	var session string
	err := s.inTx(func(ctx context.Context, tx *txn) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO admins(name, created_at) VALUES (?, ?) ON CONFLICT(name) DO NOTHING`,
			admin, now.UnixNano()); err != nil {
			return err
		}
		var revoked sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT revoked_at FROM admins WHERE name = ?`, admin).Scan(&revoked); err != nil {
			return err
		}
		if revoked.Valid {
			return errSignIn()
		}
		var err error
		session, err = openSession(ctx, tx, admin, now)
		return err
	})
	if err != nil {
		return "", err
	}
	return session, nil
}

// AddPasskey registers credential, whose WebAuthn credential ID is id, as
// admin's passkey. An admin holds at most limits.PasskeysPerAdmin; a
// credential ID already registered (to anyone) is AlreadyExists.
func (s *Store) AddPasskey(admin string, id, credential []byte, now time.Time) error {
	if !ValidAdminName(admin) {
		return errNoAdmin()
	}
	if len(id) == 0 || len(id) > maxPasskeyIDBytes || len(credential) == 0 || len(credential) > limits.MaxPasskeyBytes {
		return errcode.New(errcode.InvalidArgument, "passkey is empty or too large")
	}
	if err := checkNow(now); err != nil {
		return err
	}
	return s.inTx(func(ctx context.Context, tx *txn) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM admins WHERE name = ? AND revoked_at IS NULL`, admin).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return errNoAdmin()
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM passkeys WHERE admin = ?`, admin).Scan(&n); err != nil {
			return err
		}
		if n >= limits.PasskeysPerAdmin {
			return errcode.New(errcode.Conflict, "an admin may keep %d passkeys; remove one first", limits.PasskeysPerAdmin)
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM passkeys WHERE id = ?`, id).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return errcode.New(errcode.AlreadyExists, "this passkey is already registered")
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO passkeys(id, admin, credential, created_at) VALUES (?, ?, ?, ?)`,
			id, admin, credential, now.UnixNano())
		return err
	})
}

func scanPasskey(r rowScanner) (*Passkey, error) {
	var (
		p       Passkey
		created int64
		used    sql.NullInt64
	)
	if err := r.Scan(&p.ID, &p.Admin, &p.Credential, &created, &used); err != nil {
		return nil, err
	}
	p.CreatedAt = fromNanos(created)
	if used.Valid {
		t := fromNanos(used.Int64)
		p.UsedAt = &t
	}
	return &p, nil
}

// Passkeys returns admin's passkeys, oldest first.
func (s *Store) Passkeys(admin string) ([]Passkey, error) {
	return queryAll(s, `SELECT id, admin, credential, created_at, used_at FROM passkeys WHERE admin = ? ORDER BY created_at, id`,
		scanPasskey, admin)
}

// FindPasskey returns the passkey whose credential ID is id, if its admin
// still stands; anything else is the sign-in refusal.
func (s *Store) FindPasskey(id []byte) (*Passkey, error) {
	if len(id) == 0 || len(id) > maxPasskeyIDBytes {
		return nil, errSignIn()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	p, err := scanPasskey(s.db.QueryRowContext(ctx, `SELECT p.id, p.admin, p.credential, p.created_at, p.used_at FROM passkeys p
		JOIN admins a ON a.name = p.admin AND a.revoked_at IS NULL WHERE p.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errSignIn()
	}
	if err != nil {
		return nil, dbErr(err)
	}
	return p, nil
}

// HasPasskeys reports whether any admin who still stands has a passkey:
// whether the sign-in page offers one.
func (s *Store) HasPasskeys() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM passkeys p
		JOIN admins a ON a.name = p.admin AND a.revoked_at IS NULL`).Scan(&n); err != nil {
		return false, dbErr(err)
	}
	return n > 0, nil
}

// RemovePasskey removes admin's passkey id; someone else's, or none, is
// NotFound.
func (s *Store) RemovePasskey(admin string, id []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := s.db.ExecContext(ctx, `DELETE FROM passkeys WHERE admin = ? AND id = ?`, admin, id)
	if err != nil {
		return dbErr(err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return dbErr(err)
		}
		return errNoPasskey()
	}
	return nil
}

// PasskeySignIn opens a session for the admin of passkey id, which the
// caller has verified, storing its record as updated by the sign-in (its
// signature counter). A passkey removed or an admin revoked meanwhile is
// the sign-in refusal: the check and the session are one transaction.
func (s *Store) PasskeySignIn(id, credential []byte, now time.Time) (admin, session string, err error) {
	if len(credential) == 0 || len(credential) > limits.MaxPasskeyBytes {
		return "", "", errSignIn()
	}
	if err := checkNow(now); err != nil {
		return "", "", err
	}
	err = s.inTx(func(ctx context.Context, tx *txn) error {
		err := tx.QueryRowContext(ctx, `SELECT p.admin FROM passkeys p
			JOIN admins a ON a.name = p.admin AND a.revoked_at IS NULL WHERE p.id = ?`, id).Scan(&admin)
		if errors.Is(err, sql.ErrNoRows) {
			return errSignIn()
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE passkeys SET credential = ?, used_at = ? WHERE id = ?`,
			credential, now.UnixNano(), id); err != nil {
			return err
		}
		session, err = openSession(ctx, tx, admin, now)
		return err
	})
	if err != nil {
		return "", "", err
	}
	return admin, session, nil
}

// PutSignInState keeps data, the state of a sign-in of kind under way,
// for limits.SignInStateTTL, and returns the secret that names it (the
// cookie's value); only its hash is kept.
func (s *Store) PutSignInState(kind string, data []byte, now time.Time) (string, error) {
	if kind == "" || len(kind) > maxSignInKindBytes || len(data) > limits.MaxSignInStateBytes {
		return "", errcode.New(errcode.InvalidArgument, "sign-in state is too large")
	}
	if err := checkNow(now); err != nil {
		return "", err
	}
	id := randomB64()
	err := s.inTx(func(ctx context.Context, tx *txn) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM signin_states WHERE expires_at <= ?`, now.UnixNano()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO signin_states(hash, kind, data, expires_at) VALUES (?, ?, ?, ?)`,
			hashSecret(id), kind, data, now.Add(limits.SignInStateTTL).UnixNano())
		return err
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// TakeSignInState returns the data of the sign-in of kind that id names
// and forgets it, so it finishes once. Unknown, taken, expired and of
// another kind are the sign-in refusal.
func (s *Store) TakeSignInState(id, kind string, now time.Time) ([]byte, error) {
	if !validB64Secret(id) {
		return nil, errSignIn()
	}
	if err := checkNow(now); err != nil {
		return nil, err
	}
	var (
		data []byte
		ok   bool
	)
	err := s.inTx(func(ctx context.Context, tx *txn) error {
		var (
			k   string
			exp int64
		)
		err := tx.QueryRowContext(ctx, `SELECT kind, data, expires_at FROM signin_states WHERE hash = ?`, hashSecret(id)).Scan(&k, &data, &exp)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		// Spent even when refused: a state of another kind or out of
		// time is gone as well.
		if _, err := tx.ExecContext(ctx, `DELETE FROM signin_states WHERE hash = ?`, hashSecret(id)); err != nil {
			return err
		}
		ok = k == kind && exp > now.UnixNano()
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errSignIn()
	}
	return data, nil
}
