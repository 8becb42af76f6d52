package store

import (
	"github.com/commandcore/commandcore/internal/isolation"

	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/namechars"
)

// Admin is a person who signs in to the relay's panel. Admins act on
// devices as the principal "admin:<name>".
type Admin struct {
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// Sessions counts the admin's open panel sessions.
	Sessions int `json:"sessions"`
}

// PanelSession is a signed-in admin's session.
type PanelSession struct {
	Admin     string
	CreatedAt time.Time
}

const (
	signInPrefix  = "ccA-"
	signInCodeLen = 20
	sessionPrefix = "ccs_"
	// sessionSeenEvery is how stale a session's last use may be before a
	// request records it again: one write a minute, not one a request.
	sessionSeenEvery = time.Minute
	// MaxAgentVersionBytes bounds the agent version a link reports.
	MaxAgentVersionBytes = 64
)

// ValidAdminName reports whether name may name an admin: what a principal
// may be named, since an admin acts as "admin:<name>".
func ValidAdminName(name string) bool { return namechars.Valid(name, MaxNameBytes) }

func errAdminName() error {
	return errcode.New(errcode.InvalidArgument, "admin name must be 1 to %d characters of letters, digits, '.', '_' and '-'", MaxNameBytes)
}

func errNoAdmin() error { return errcode.New(errcode.NotFound, "no such admin") }

// errSignIn is the one refusal of a sign-in code: wrong, used, expired or
// its admin revoked look alike.
func errSignIn() error {
	return errcode.New(errcode.PermissionDenied, "sign-in code is invalid, used or expired")
}

func errSession() error {
	return errcode.New(errcode.PermissionDenied, "panel session is invalid or expired")
}

// CreateSignIn makes name an admin (again, if revoked) and returns a
// one-time sign-in code for them valid for ttl from now. An admin may hold
// several unused codes; each signs in once.
func (s *Store) CreateSignIn(name string, ttl time.Duration, now time.Time) (string, error) {
	if !ValidAdminName(name) {
		return "", errAdminName()
	}
	exp, err := expiry(now, ttl)
	if err != nil {
		return "", err
	}
	code := newCode(signInPrefix, signInCodeLen)
	err = s.inTx(func(ctx context.Context, tx *txn) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM admin_codes WHERE expires_at < ?`, now.Add(-codeGCAge).UnixNano()); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO admins(name, created_at) VALUES (?, ?)
			ON CONFLICT(name) DO UPDATE SET revoked_at = NULL`, name, now.UnixNano()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO admin_codes(hash, admin, created_at, expires_at) VALUES (?, ?, ?, ?)`,
			hashSecret(code), name, now.UnixNano(), exp.UnixNano())
		return err
	})
	if err != nil {
		return "", err
	}
	return code, nil
}

// SignIn consumes a sign-in code and opens a new session for its admin,
// returning the admin's name and the session's secret (the cookie's
// value), which is stored only as a hash. Every refusal is the same
// PermissionDenied.
func (s *Store) SignIn(code string, now time.Time) (admin, session string, err error) {
	canon := canonicalPrefixed(code, signInPrefix, signInCodeLen)
	if canon == "" {
		return "", "", errSignIn()
	}
	if err := checkNow(now); err != nil {
		return "", "", err
	}
	hash := hashSecret(canon)
	err = s.inTx(func(ctx context.Context, tx *txn) error {
		res, err := tx.ExecContext(ctx, `UPDATE admin_codes SET used_at = ? WHERE hash = ? AND used_at IS NULL AND expires_at > ?
			AND admin IN (SELECT name FROM admins WHERE revoked_at IS NULL)`, now.UnixNano(), hash, now.UnixNano())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err != nil {
				return err
			}
			return errSignIn()
		}
		if err := tx.QueryRowContext(ctx, `SELECT admin FROM admin_codes WHERE hash = ?`, hash).Scan(&admin); err != nil {
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

// validSession checks a session secret's shape only; its hash decides.
func validSession(session string) bool {
	return strings.HasPrefix(session, sessionPrefix) && validB64Secret(session[len(sessionPrefix):])
}

// AuthSession resolves a session secret to its session: one that exists,
// was used within limits.PanelSessionIdle, began within
// limits.PanelSessionMax and whose admin is not revoked, read afresh on
// every call so that a revocation by any replica or the CLI ends it at the
// next request. Its use is recorded at most once a minute.
func (s *Store) AuthSession(session string, now time.Time) (*PanelSession, error) {
	return s.lookSession(session, now, true)
}

// SessionLive reports, as AuthSession, whether a session still stands,
// without counting as its use: an open live page re-checks its session
// with it, and keeps no idle session alive by staying open.
func (s *Store) SessionLive(session string, now time.Time) error {
	_, err := s.lookSession(session, now, false)
	return err
}

func (s *Store) lookSession(session string, now time.Time, use bool) (*PanelSession, error) {
	if !validSession(session) {
		return nil, errSession()
	}
	if err := checkNow(now); err != nil {
		return nil, err
	}
	hash := hashSecret(session)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var (
		p             PanelSession
		created, seen int64
	)
	err := s.db.QueryRowContext(ctx, `SELECT p.admin, p.created_at, p.seen_at FROM panel_sessions p
		JOIN admins a ON a.name = p.admin AND a.revoked_at IS NULL WHERE p.hash = ?`, hash).Scan(&p.Admin, &created, &seen)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errSession()
	}
	if err != nil {
		return nil, dbErr(err)
	}
	if now.UnixNano()-seen >= int64(limits.PanelSessionIdle) || now.UnixNano()-created >= int64(limits.PanelSessionMax) {
		return nil, errSession()
	}
	if use && now.UnixNano()-seen >= int64(sessionSeenEvery) {
		if _, err := s.db.ExecContext(ctx, `UPDATE panel_sessions SET seen_at = ? WHERE hash = ? AND seen_at < ?`,
			now.UnixNano(), hash, now.UnixNano()); err != nil {
			return nil, dbErr(err)
		}
	}
	p.CreatedAt = fromNanos(created)
	return &p, nil
}

// EndSession ends a session (sign-out); ending one that does not exist
// succeeds.
func (s *Store) EndSession(session string) error {
	if !validSession(session) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, `DELETE FROM panel_sessions WHERE hash = ?`, hashSecret(session)); err != nil {
		return dbErr(err)
	}
	return nil
}

// Admins returns every admin, revoked ones too, by name, with their open
// sessions counted.
func (s *Store) Admins(now time.Time) ([]Admin, error) {
	return queryAll(s, `SELECT a.name, a.created_at, a.revoked_at,
			(SELECT count(*) FROM panel_sessions p WHERE p.admin = a.name AND p.seen_at > ? AND p.created_at > ?)
		FROM admins a ORDER BY a.name`,
		func(r rowScanner) (*Admin, error) {
			var (
				a       Admin
				created int64
				revoked sql.NullInt64
			)
			if err := r.Scan(&a.Name, &created, &revoked, &a.Sessions); err != nil {
				return nil, err
			}
			a.CreatedAt = fromNanos(created)
			if revoked.Valid {
				t := fromNanos(revoked.Int64)
				a.RevokedAt = &t
				a.Sessions = 0
			}
			return &a, nil
		}, now.Add(-limits.PanelSessionIdle).UnixNano(), now.Add(-limits.PanelSessionMax).UnixNano())
}

// RevokeAdmin revokes admin name at now: their sessions, unused sign-in
// codes and passkeys end in the same transaction. Revoking a revoked admin succeeds and
// keeps the first time. NotFound if there is no such admin.
func (s *Store) RevokeAdmin(name string, now time.Time) error {
	if !ValidAdminName(name) {
		return errNoAdmin()
	}
	if err := checkNow(now); err != nil {
		return err
	}
	return s.inTx(func(ctx context.Context, tx *txn) error {
		res, err := tx.ExecContext(ctx, `UPDATE admins SET revoked_at = coalesce(revoked_at, ?) WHERE name = ?`, now.UnixNano(), name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return err
			}
			return errNoAdmin()
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM panel_sessions WHERE admin = ?`, name); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM passkeys WHERE admin = ?`, name); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM admin_codes WHERE admin = ? AND used_at IS NULL`, name)
		return err
	})
}

// AgentNote is what a device's link reported at its start: the agent's
// version, whether that agent checks a grant's call digest, how its jobs
// are kept from it, whether it takes numbered grants, and the version the
// relay offers it (empty for none).
type AgentNote struct {
	Version, Offered string
	BindsCalls       bool
	NumbersGrants    bool
	Isolation        isolation.Report
}

// NoteAgent records note for device while replica still holds its link. A
// version that is not printable ASCII of at most MaxAgentVersionBytes is
// recorded as "unknown", and an isolation word outside its set as
// nothing: they are shown to people, and come from the device.
func (s *Store) NoteAgent(device, replica string, note AgentNote) error {
	version, offered := note.Version, note.Offered
	if !printableASCII(version, MaxAgentVersionBytes) {
		version = "unknown"
	}
	if offered != "" && !printableASCII(offered, MaxAgentVersionBytes) {
		offered = ""
	}
	iso := note.Isolation.Known()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, `UPDATE devices SET agent_version = ?, binds_calls = ?, update_offer = ?, agent_binary = ?, user_manager = ?, numbers_grants = ? WHERE id = ? AND held_by = ?`,
		version, boolInt(note.BindsCalls), offered, iso.AgentBinary, iso.UserManager, boolInt(note.NumbersGrants), device, replica); err != nil {
		return dbErr(err)
	}
	return nil
}

func printableASCII(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
