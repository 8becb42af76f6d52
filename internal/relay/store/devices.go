package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/commandcore/commandcore/internal/isolation"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/commandcore/commandcore/internal/errcode"
)

// Device is an enrolled device.
type Device struct {
	// ID is a random (v4) UUID assigned at enrollment.
	ID string `json:"id"`
	// Name is unique among devices.
	Name       string     `json:"name"`
	EnrolledAt time.Time  `json:"enrolled_at"`
	LastSeen   *time.Time `json:"last_seen,omitempty"`
	// Connected is whether a live relay replica holds the device's link,
	// Replica which one (its ID).
	Connected bool   `json:"connected"`
	Replica   string `json:"replica,omitempty"`
	// Standing is StandingActive, StandingCompromised, StandingRevoked or
	// StandingRemoved;
	// StandingAt is when it last changed (unset while active).
	Standing   string     `json:"standing"`
	StandingAt *time.Time `json:"standing_at,omitempty"`
	// LinkedAt is when the replica holding the device's link took it, and
	// AgentVersion the version its agent gave then (empty until known).
	// Both are the last link's once it ends.
	LinkedAt     *time.Time `json:"linked_at,omitempty"`
	AgentVersion string     `json:"agent_version,omitempty"`
	// BindsCalls is whether that agent checks a grant's call digest
	// (authz.BindsCallsCapability): grants for it name their call.
	BindsCalls bool `json:"-"`
	// NumbersGrants is whether that agent takes numbered grants
	// (authz.GrantSequenceCapability).
	NumbersGrants bool `json:"-"`
	// UpdateOffer is the version the relay holding the link offers the
	// agent, which runs another (the agent is outdated); empty when it
	// runs what the relay serves, or updates are off.
	UpdateOffer string `json:"update_offer,omitempty"`
	// Isolation is what that agent said of how its jobs are kept from
	// it (its words empty until known, or from an agent too old to say).
	Isolation isolation.Report `json:"isolation"`
}

const (
	// enrollPrefix starts every enrollment code; enrollCodeLen is the
	// number of base32 characters after it (100 random bits).
	enrollPrefix  = "ccE-"
	enrollCodeLen = 20
	// base32Alphabet is RFC 4648 base32; 32 divides 256, so one random
	// byte masked to 5 bits picks a character uniformly.
	base32Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	// DeviceSecretBytes is the size of a device's heartbeat secret.
	DeviceSecretBytes = 32
	// codeGCAge is how long after expiry an enrollment code is kept.
	codeGCAge = 24 * time.Hour
)

// errEnrollCode is the one refusal of an enrollment, whatever the reason:
// an unknown, expired or used code, or a valid code that needs a proposed
// name and got an invalid one. It says nothing about which, so it cannot
// tell anyone that a code they hold is valid without using it.
func errEnrollCode() error {
	return errcode.New(errcode.PermissionDenied, "enrollment code is invalid, expired or used, or the proposed device name is not valid")
}

// DeviceNameRule says what ValidDeviceName accepts.
var DeviceNameRule = fmt.Sprintf("1 to %d characters of letters, digits, '.', '_' and '-', not shaped like a device ID", MaxNameBytes)

// errDeviceName refuses a device name an administrator gives.
func errDeviceName() error {
	return errcode.New(errcode.InvalidArgument, "device name must be %s", DeviceNameRule)
}

func errDeviceToken() error { return errcode.New(errcode.PermissionDenied, "device token is invalid") }

func errNoDevice() error { return errcode.New(errcode.NotFound, "no such device") }

// CreateEnrollCode returns a new one-time enrollment code ("ccE-" and 20
// base32 characters) valid for ttl from now. A non-empty name is the name
// the enrolled device gets (suffixed if taken); an empty one lets the
// device propose its own. Only the code's hash is stored. Codes that
// expired more than a day ago are deleted.
func (s *Store) CreateEnrollCode(name string, ttl time.Duration, now time.Time) (string, error) {
	if name != "" && !ValidDeviceName(name) {
		return "", errDeviceName()
	}
	exp, err := expiry(now, ttl)
	if err != nil {
		return "", err
	}
	code := newCode(enrollPrefix, enrollCodeLen)
	err = s.inTx(func(ctx context.Context, tx *txn) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM enroll_codes WHERE expires_at < ?`,
			now.Add(-codeGCAge).UnixNano()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO enroll_codes(hash, name, created_at, expires_at) VALUES (?, ?, ?, ?)`,
			hashSecret(code), name, now.UnixNano(), exp.UnixNano())
		return err
	})
	if err != nil {
		return "", err
	}
	return code, nil
}

// newCode returns prefix and n random base32 characters: a code people
// type (an enrollment or sign-in code).
func newCode(prefix string, n int) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, c := range randomBytes(n) {
		b.WriteByte(base32Alphabet[c&31])
	}
	return b.String()
}

// canonicalCode returns the canonical form of an enrollment code, accepting
// any letter case (people type codes), or "" when code is malformed.
func canonicalCode(code string) string { return canonicalPrefixed(code, enrollPrefix, enrollCodeLen) }

// canonicalPrefixed is canonicalCode for newCode(prefix, n)'s codes.
func canonicalPrefixed(code, prefix string, n int) string {
	if len(code) != len(prefix)+n || !strings.EqualFold(code[:len(prefix)], prefix) {
		return ""
	}
	body := strings.ToUpper(code[len(prefix):])
	for i := 0; i < len(body); i++ {
		if strings.IndexByte(base32Alphabet, body[i]) < 0 {
			return ""
		}
	}
	return prefix + body
}

// Enroll consumes the enrollment code and creates a device. The code is
// consumed exactly once: of concurrent Enrolls with one code (in any
// number of processes), exactly one succeeds. The device is named after
// the code's name when it has one (proposedName is then ignored), else
// proposedName, which must be a valid device name (ValidDeviceName); a
// name already taken gets "-2", "-3", ... appended.
//
// It returns the device, its bearer token ("ccd_" and 43 base64url
// characters, stored only as a hash) and its 32-byte heartbeat secret.
// Every refusal is one PermissionDenied error with one message: an
// unknown, expired or used code, and a code without a name given an
// invalid proposed name, which leaves the code unused. A client checks
// its proposed name itself to tell its user why.
func (s *Store) Enroll(code, proposedName string, now time.Time) (dev *Device, token string, secret []byte, err error) {
	canon := canonicalCode(code)
	if canon == "" {
		return nil, "", nil, errEnrollCode()
	}
	if err := checkNow(now); err != nil {
		return nil, "", nil, err
	}
	id, err := uuid.NewRandom()
	if err != nil {
		return nil, "", nil, errcode.Wrap(errcode.Internal, err, "cannot create a device ID")
	}
	token = NewDeviceToken()
	// The heartbeat secret is stored as is, not hashed: the relay verifies
	// the device's heartbeat MACs with it, so it must be able to compute
	// them itself. It never leaves the relay except in this return value.
	secret = randomBytes(DeviceSecretBytes)
	d := Device{ID: id.String(), EnrolledAt: fromNanos(now.UnixNano()), Standing: StandingActive}
	hash := hashSecret(canon)

	err = s.inTx(func(ctx context.Context, tx *txn) error {
		var (
			stored  []byte
			name    string
			expires int64
			used    sql.NullInt64
		)
		err := tx.QueryRowContext(ctx, `SELECT hash, name, expires_at, used_at FROM enroll_codes WHERE hash = ?`, hash).
			Scan(&stored, &name, &expires, &used)
		if errors.Is(err, sql.ErrNoRows) {
			return errEnrollCode()
		}
		if err != nil {
			return err
		}
		if !sameHash(stored, hash) || used.Valid || now.UnixNano() >= expires {
			return errEnrollCode()
		}
		if name == "" {
			if !ValidDeviceName(proposedName) {
				return errEnrollCode()
			}
			name = proposedName
		} else if err := releaseName(ctx, tx, name); err != nil {
			return err
		}
		// The write lock is held since BEGIN, so no one else can consume
		// the code between the check and here; the condition makes the
		// update safe on its own as well.
		res, err := tx.ExecContext(ctx, `UPDATE enroll_codes SET used_at = ? WHERE hash = ? AND used_at IS NULL`,
			now.UnixNano(), hash)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err != nil {
				return err
			}
			return errEnrollCode()
		}
		if d.Name, err = freeName(ctx, tx, name); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO devices(id, name, token_hash, secret, enrolled_at, connected) VALUES (?, ?, ?, ?, ?, 0)`,
			d.ID, d.Name, hashSecret(token), secret, now.UnixNano())
		return err
	})
	if err != nil {
		return nil, "", nil, err
	}
	return &d, token, secret, nil
}

// freeName returns name, or name with the smallest suffix "-N" (N >= 2)
// that no device has. The base is shortened when the suffix would take
// the name past MaxNameBytes.
func freeName(ctx context.Context, tx *txn, name string) (string, error) {
	taken := func(n string) (bool, error) {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM devices WHERE name = ?`, n).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	}
	if t, err := taken(name); err != nil || !t {
		return name, err
	}
	var count int64
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM devices`).Scan(&count); err != nil {
		return "", err
	}
	// At most count names are taken, so one of 2..count+2 is free.
	for i := int64(2); i <= count+2; i++ {
		suffix := "-" + strconv.FormatInt(i, 10)
		base := name
		if len(base)+len(suffix) > MaxNameBytes {
			base = base[:MaxNameBytes-len(suffix)]
		}
		cand := base + suffix
		if !ValidDeviceName(cand) {
			continue
		}
		t, err := taken(cand)
		if err != nil {
			return "", err
		}
		if !t {
			return cand, nil
		}
	}
	return "", errcode.New(errcode.Internal, "no free device name")
}

const deviceColumns = `id, name, enrolled_at, last_seen, connected, standing, standing_at, held_by, linked_at, agent_version, binds_calls, update_offer, agent_binary, user_manager, numbers_grants`

type rowScanner interface{ Scan(dest ...any) error }

func scanDevice(r rowScanner, extra ...any) (*Device, error) {
	var (
		d        Device
		enrolled int64
		seen     sql.NullInt64
		conn     int64
		standAt  sql.NullInt64
		linked   sql.NullInt64
		binds    int64
		numbers  int64
	)
	if err := r.Scan(append([]any{&d.ID, &d.Name, &enrolled, &seen, &conn, &d.Standing, &standAt, &d.Replica, &linked, &d.AgentVersion, &binds, &d.UpdateOffer, &d.Isolation.AgentBinary, &d.Isolation.UserManager, &numbers}, extra...)...); err != nil {
		return nil, err
	}
	d.EnrolledAt = fromNanos(enrolled)
	if seen.Valid {
		t := fromNanos(seen.Int64)
		d.LastSeen = &t
	}
	if standAt.Valid {
		t := fromNanos(standAt.Int64)
		d.StandingAt = &t
	}
	if linked.Valid {
		t := fromNanos(linked.Int64)
		d.LinkedAt = &t
	}
	d.Connected = conn != 0
	d.BindsCalls = binds != 0
	d.NumbersGrants = numbers != 0
	return &d, nil
}

// AuthDevice resolves a device bearer token to its device and heartbeat
// secret. Anything but a current device's token is PermissionDenied. A
// token of a device that is not active, or one rotated away (which marks
// its device compromised, see rotate.go), is refused with a *DeviceRefusal
// as the error's cause.
func (s *Store) AuthDevice(token string, now time.Time) (*Device, []byte, error) {
	if !validDeviceToken(token) {
		return nil, nil, errDeviceToken()
	}
	if err := checkNow(now); err != nil {
		return nil, nil, err
	}
	hash := hashSecret(token)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var stored, secret []byte
	d, err := scanDevice(s.db.QueryRowContext(ctx,
		`SELECT `+deviceColumns+`, token_hash, secret FROM devices WHERE token_hash = ?`, hash), &stored, &secret)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, s.retiredToken(hash, now)
	}
	if err != nil {
		return nil, nil, dbErr(err)
	}
	if !sameHash(stored, hash) {
		return nil, nil, errDeviceToken()
	}
	if d.Standing != StandingActive {
		return nil, nil, errRefused(d, false)
	}
	if len(secret) != DeviceSecretBytes {
		return nil, nil, errcode.New(errcode.Internal, "device record is corrupt")
	}
	return d, secret, nil
}

// FindDevice returns the device idOrName means: the device with that ID
// when idOrName is shaped like a device ID (IsDeviceID, any letter case),
// else the device with exactly that name. The shape decides, so no name
// can stand for another device's ID; a device enrolled before names were
// kept from that shape is found by its ID only.
func (s *Store) FindDevice(idOrName string) (*Device, error) {
	if idOrName == "" || len(idOrName) > MaxNameBytes {
		return nil, errNoDevice()
	}
	query := `SELECT ` + deviceColumns + ` FROM devices WHERE name = ?`
	if IsDeviceID(idOrName) {
		query = `SELECT ` + deviceColumns + ` FROM devices WHERE id = ?`
		idOrName = strings.ToLower(idOrName)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	d, err := scanDevice(s.db.QueryRowContext(ctx, query, idOrName))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoDevice()
	}
	if err != nil {
		return nil, dbErr(err)
	}
	return d, nil
}

// Devices returns every device, ordered by name.
func (s *Store) Devices() ([]Device, error) {
	return queryAll(s, `SELECT `+deviceColumns+` FROM devices ORDER BY name`,
		func(r rowScanner) (*Device, error) { return scanDevice(r) })
}

// Standing is a device's ID and standing, all a relay's link watcher needs.
type Standing struct {
	ID       string
	Standing string
}

// Standings returns every device's standing: Devices without the columns
// a link watcher does not read, for a query it makes every second.
func (s *Store) Standings() ([]Standing, error) {
	return queryAll(s, `SELECT id, standing FROM devices`, func(r rowScanner) (*Standing, error) {
		var st Standing
		if err := r.Scan(&st.ID, &st.Standing); err != nil {
			return nil, err
		}
		return &st, nil
	})
}

// StandingChanges returns the standing-change counter: a number that
// changes whenever Standings would return something else (a device
// enrolled or deleted, or its standing changed, by any process), and not
// when only last-seen, connection state or a token changes. A link
// watcher reads it every second and reads the standings only when it
// moved: one integer rather than every device.
func (s *Store) StandingChanges() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT n FROM standing_changes`).Scan(&n); err != nil {
		return 0, dbErr(err)
	}
	return n, nil
}

// SetSeen records that the devices ids, all linked, were seen at at: one
// statement for all of them, where an update each would take one each (at
// 10,000 devices it is 2.5 times as fast as a transaction of one update a
// device, BenchmarkSetSeen). A device that no longer exists is skipped.
// It sets the last-seen time only: whether a link is held is TakeLink's
// and ReleaseLink's, so a link that ended meanwhile stays ended.
func (s *Store) SetSeen(ids []string, at time.Time) error {
	if err := checkNow(at); err != nil {
		return err
	}
	list, _ := json.Marshal(ids) // strings always encode
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, s.db.jsonList(`UPDATE devices SET last_seen = ? WHERE id IN `),
		at.UnixNano(), string(list)); err != nil {
		return dbErr(err)
	}
	return nil
}
