package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// Replica is a relay process serving from this state: one row while it
// runs, refreshed every limits.ReplicaBeat. One not seen for
// limits.ReplicaTTL is gone, and the links it held are released.
type Replica struct {
	// ID is random per process start.
	ID string `json:"id"`
	// Name is what the operator calls it (default: the host name).
	Name string `json:"name"`
	// Address is the client endpoint it announced.
	Address string `json:"address"`
	// Panel is the base URL of its web panel, when it serves one.
	Panel string `json:"panel,omitempty"`
	// NATS is whether it joined the others through NATS; replicas that did
	// not run alone.
	NATS bool `json:"nats"`
	// BootID, PID and StartTicks name its process, so that a replica
	// starting on the same host can tell a killed one from a live one.
	BootID     string    `json:"boot_id"`
	PID        int       `json:"pid"`
	StartTicks uint64    `json:"start_ticks"`
	StartedAt  time.Time `json:"started_at"`
	SeenAt     time.Time `json:"seen_at"`
	// Links is how many device links it holds.
	Links int `json:"links"`
}

// errAlone refuses a replica that cannot join the live ones.
func errAlone() error {
	return errcode.New(errcode.Unavailable,
		"another relay replica is live on this database without NATS between them; start every replica with --nats (or stop the other)")
}

func errNoReplica() error {
	return errcode.New(errcode.NotFound, "no such live relay replica")
}

const replicaColumns = `id, name, address, nats, boot_id, pid, start_ticks, started_at, seen_at, panel`

// JoinReplica records r as live at now, after sweeping away the replicas
// not seen for limits.ReplicaTTL. Replicas share a database only through
// NATS: a replica without it is refused beside a live one, and beside a
// live one without it every replica is refused (Unavailable, saying why).
func (s *Store) JoinReplica(r Replica, now time.Time) error {
	if err := checkNow(now); err != nil {
		return err
	}
	if !ValidName(r.Name) || !ValidName(r.ID) || len(r.Address) > maxAuditText || len(r.Panel) > maxAuditText {
		return errcode.New(errcode.InvalidArgument, "a relay replica's name must be %s", DeviceNameRule)
	}
	return s.inTx(func(ctx context.Context, tx *txn) error {
		if err := sweepReplicas(ctx, tx, now); err != nil {
			return err
		}
		var alone int
		err := tx.QueryRowContext(ctx, `SELECT count(*) FROM replicas WHERE id != ? AND (nats = 0 OR ? = 0)`, r.ID, boolInt(r.NATS)).Scan(&alone)
		if err != nil {
			return err
		}
		if alone > 0 {
			return errAlone()
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO replicas(`+replicaColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.Name, r.Address, boolInt(r.NATS), r.BootID, r.PID, int64(r.StartTicks), now.UnixNano(), now.UnixNano(), r.Panel)
		return err
	})
}

// ReplicaSeen records that replica id is alive at now, and sweeps away
// the replicas not seen for limits.ReplicaTTL. NotFound when id itself
// was swept (it stalled past the TTL, and its links are released): it
// must join again.
func (s *Store) ReplicaSeen(id string, now time.Time) error {
	if err := checkNow(now); err != nil {
		return err
	}
	return s.inTx(func(ctx context.Context, tx *txn) error {
		res, err := tx.ExecContext(ctx, `UPDATE replicas SET seen_at = ? WHERE id = ?`, now.UnixNano(), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = errNoReplica()
			}
			return err
		}
		return sweepReplicas(ctx, tx, now)
	})
}

// LeaveReplica removes replica id and releases the links it held: a
// replica that stops, or one found dead by another on its host.
func (s *Store) LeaveReplica(id string) error {
	return s.inTx(func(ctx context.Context, tx *txn) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM replicas WHERE id = ?`, id); err != nil {
			return err
		}
		return releaseHolds(ctx, tx)
	})
}

// sweepReplicas deletes the replicas not seen since now - ReplicaTTL and
// releases their links.
func sweepReplicas(ctx context.Context, tx *txn, now time.Time) error {
	res, err := tx.ExecContext(ctx, `DELETE FROM replicas WHERE seen_at < ?`, now.Add(-limits.ReplicaTTL).UnixNano())
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	return releaseHolds(ctx, tx)
}

// releaseHolds releases the links of replicas that no longer exist.
func releaseHolds(ctx context.Context, tx *txn) error {
	_, err := tx.ExecContext(ctx, `UPDATE devices SET held_by = '', connected = 0
		WHERE held_by != '' AND held_by NOT IN (SELECT id FROM replicas)`)
	return err
}

// Replicas returns the replicas seen within limits.ReplicaTTL of now,
// oldest first, with the links each holds.
func (s *Store) Replicas(now time.Time) ([]Replica, error) {
	if err := checkNow(now); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, `SELECT `+replicaColumns+`,
		(SELECT count(*) FROM devices WHERE held_by = replicas.id)
		FROM replicas WHERE seen_at >= ? ORDER BY started_at, id`, now.Add(-limits.ReplicaTTL).UnixNano())
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	out := []Replica{}
	for rows.Next() {
		var (
			r             Replica
			nats          int64
			ticks         int64
			started, seen int64
		)
		if err := rows.Scan(&r.ID, &r.Name, &r.Address, &nats, &r.BootID, &r.PID, &ticks, &started, &seen, &r.Panel, &r.Links); err != nil {
			return nil, dbErr(err)
		}
		r.NATS, r.StartTicks = nats != 0, uint64(ticks)
		r.StartedAt, r.SeenAt = fromNanos(started), fromNanos(seen)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(err)
	}
	return out, nil
}

// LinkHolder returns the ID of the live replica that holds device's
// link, or "" when none does.
func (s *Store) LinkHolder(device string, now time.Time) (string, error) {
	if err := checkNow(now); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var holder string
	err := s.db.QueryRowContext(ctx, `SELECT d.held_by FROM devices d JOIN replicas r ON r.id = d.held_by
		WHERE d.id = ? AND r.seen_at >= ?`, device, now.Add(-limits.ReplicaTTL).UnixNano()).Scan(&holder)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", dbErr(err)
	}
	return holder, nil
}

// TakeLink records that replica holds device's link from now on, if the
// link's holder is still from ("" for none, or a replica that is gone):
// replicas admitting one device at once race here, and one wins. It
// reports whether this call took it.
func (s *Store) TakeLink(device, replica, from string, now time.Time) (bool, error) {
	if err := checkNow(now); err != nil {
		return false, err
	}
	var took bool
	err := s.inTx(func(ctx context.Context, tx *txn) error {
		var holder string
		err := tx.QueryRowContext(ctx, `SELECT held_by FROM devices WHERE id = ?`, device).Scan(&holder)
		if errors.Is(err, sql.ErrNoRows) {
			return errNoDevice()
		}
		if err != nil {
			return err
		}
		if holder != from && holder != "" {
			var live int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM replicas WHERE id = ? AND seen_at >= ?`,
				holder, now.Add(-limits.ReplicaTTL).UnixNano()).Scan(&live); err != nil {
				return err
			}
			if live > 0 {
				return nil
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE devices SET held_by = ?, connected = 1, last_seen = ?, linked_at = ?, agent_version = '', binds_calls = 0, update_offer = '', agent_binary = '', user_manager = '', numbers_grants = 0 WHERE id = ?`,
			replica, now.UnixNano(), now.UnixNano(), device)
		took = err == nil
		return err
	})
	return took, err
}

// ReleaseLink records that replica no longer holds device's link; a link
// another replica took over since is left alone.
func (s *Store) ReleaseLink(device, replica string, now time.Time) error {
	if err := checkNow(now); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, `UPDATE devices SET held_by = '', connected = 0, last_seen = ? WHERE id = ? AND held_by = ?`,
		now.UnixNano(), device, replica); err != nil {
		return dbErr(err)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
