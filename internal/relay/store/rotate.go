package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
)

// A device's standing says whether its credentials may still link.
const (
	StandingActive = "active"
	// StandingCompromised: a rotated-away token came back, so a copy of the
	// device's credentials exists. Set only by the relay itself.
	StandingCompromised = "compromised"
	// StandingRevoked: the relay's owner revoked the device.
	StandingRevoked = "revoked"
	// StandingRemoved: the device left with its own credential, its agent
	// uninstalled with its identity (LeaveDevice).
	StandingRemoved = "removed"
)

// deviceTokenPrefix starts every device bearer token.
const deviceTokenPrefix = "ccd_"

// NewDeviceToken returns a fresh device bearer token: "ccd_" and 43
// base64url characters (32 random bytes).
func NewDeviceToken() string { return deviceTokenPrefix + randomB64() }

func validDeviceToken(token string) bool {
	return len(token) == len(deviceTokenPrefix)+43 && strings.HasPrefix(token, deviceTokenPrefix) &&
		validB64Secret(token[len(deviceTokenPrefix):])
}

// DeviceRefusal is the cause of AuthDevice's refusal of a token that names
// a device which may not link: the relay ends that device's links.
type DeviceRefusal struct {
	DeviceID string
	Standing string
	// Detected: this very presentation was a rotated-away token, and it
	// marked the device compromised.
	Detected bool
}

func (r *DeviceRefusal) Error() string { return "device " + r.DeviceID + " is " + r.Standing }

func errRefused(d *Device, detected bool) error {
	return errcode.Wrap(errcode.PermissionDenied, &DeviceRefusal{DeviceID: d.ID, Standing: d.Standing, Detected: detected},
		"the device's credentials are revoked; enroll the device again")
}

// RotateDeviceToken makes next the device's token in place of current and
// retires current: presenting it again marks the device compromised. It
// changes nothing, and is PermissionDenied, unless current is the device's
// token now and the device is active, so a late or repeated confirmation
// of a rotation never retires a newer token.
func (s *Store) RotateDeviceToken(id, current, next string, now time.Time) error {
	if !validDeviceToken(current) || !validDeviceToken(next) || current == next {
		return errcode.New(errcode.InvalidArgument, "malformed device token")
	}
	if err := checkNow(now); err != nil {
		return err
	}
	return s.inTx(func(ctx context.Context, tx *txn) error {
		res, err := tx.ExecContext(ctx, `UPDATE devices SET token_hash = ? WHERE id = ? AND token_hash = ? AND standing = ?`,
			hashSecret(next), id, hashSecret(current), StandingActive)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err != nil {
				return err
			}
			return errcode.New(errcode.PermissionDenied, "the device token is not current")
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO retired_device_tokens(hash, device_id, retired_at) VALUES (?, ?, ?)`,
			hashSecret(current), id, now.UnixNano())
		return err
	})
}

// retiredToken is AuthDevice's answer for a token no device has now: a
// rotated-away token marks its device compromised (once; the first time is
// Detected) and is refused with a DeviceRefusal; anything else is an
// invalid token. Only a retired token takes the write lock, so guessed
// tokens cost a read each.
func (s *Store) retiredToken(hash []byte, now time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var id string
	err := s.db.QueryRowContext(ctx, `SELECT device_id FROM retired_device_tokens WHERE hash = ?`, hash).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return errDeviceToken()
	}
	if err != nil {
		return dbErr(err)
	}
	var dev *Device
	detected := false
	err = s.inTx(func(ctx context.Context, tx *txn) error {
		res, err := tx.ExecContext(ctx, `UPDATE devices SET standing = ?, standing_at = ? WHERE id = ? AND standing = ?`,
			StandingCompromised, now.UnixNano(), id, StandingActive)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		detected = n == 1
		dev, err = scanDevice(tx.QueryRowContext(ctx, `SELECT `+deviceColumns+` FROM devices WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return errDeviceToken()
		}
		return err
	})
	if err != nil {
		return err
	}
	return errRefused(dev, detected)
}

// RevokeDevice ends a device's credentials: an active device (by ID, or
// else by name) becomes revoked, and AuthDevice refuses its tokens from
// then on. A device that is already not active keeps its standing. It
// returns the device as it now stands and whether this call revoked it.
func (s *Store) RevokeDevice(idOrName string, now time.Time) (*Device, bool, error) {
	return s.endStanding(idOrName, StandingRevoked, now)
}

// LeaveDevice marks the active device id removed at now, as it asked
// with its own credential when its agent was uninstalled for good; its
// credentials are refused from then on, as a revoked device's are, and
// its name is free for a new enrollment. It reports the device, and
// whether this call removed it.
func (s *Store) LeaveDevice(id string, now time.Time) (*Device, bool, error) {
	return s.endStanding(id, StandingRemoved, now)
}

// endStanding takes an active device to standing at now.
func (s *Store) endStanding(idOrName, standing string, now time.Time) (*Device, bool, error) {
	if err := checkNow(now); err != nil {
		return nil, false, err
	}
	d, err := s.FindDevice(idOrName)
	if err != nil {
		return nil, false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := s.db.ExecContext(ctx, `UPDATE devices SET standing = ?, standing_at = ? WHERE id = ? AND standing = ?`,
		standing, now.UnixNano(), d.ID, StandingActive)
	if err != nil {
		return nil, false, dbErr(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, false, dbErr(err)
	}
	d, err = s.FindDevice(d.ID)
	return d, n == 1, err
}

// releaseName frees name for a new enrollment when the device holding it
// is compromised or revoked: re-enrolling under the name an owner chose in
// the code replaces that device (its record and retired tokens go), so
// client tokens scoped to the name reach the new one. An active device
// keeps its name.
func releaseName(ctx context.Context, tx *txn, name string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM retired_device_tokens WHERE device_id IN
		(SELECT id FROM devices WHERE name = ? AND standing != ?)`, name, StandingActive); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM devices WHERE name = ? AND standing != ?`, name, StandingActive)
	return err
}
