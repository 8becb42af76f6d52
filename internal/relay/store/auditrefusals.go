package store

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// RefusalCount counts the requests from one source in one minute that
// the relay refused without a valid client token. They are kept apart from
// the audit's entries, one row per source and minute however many there
// were, so that no number of them can push a call out of the log.
type RefusalCount struct {
	// Minute is the minute the requests arrived in (its first instant).
	Minute time.Time `json:"minute"`
	// Source is the address they came from, as the relay counts it (an
	// IPv4 address or an IPv6 network prefix); empty when unknown, or for
	// the sources past what the relay counts one by one.
	Source string `json:"source"`
	Count  int64  `json:"count"`
}

func errRefusalCount() error {
	return errcode.New(errcode.InvalidArgument, "audit refusal count is not a content-free record")
}

// validRefusalCount checks a count against the log's grammar: a whole minute,
// a positive count and a canonical address or prefix, so nothing a client
// sent can be stored.
func validRefusalCount(r *RefusalCount) bool {
	if !storable(r.Minute) || !r.Minute.Equal(r.Minute.Truncate(time.Minute)) || r.Count < 1 {
		return false
	}
	if r.Source == "" {
		return true
	}
	if a, err := netip.ParseAddr(r.Source); err == nil {
		return a.Zone() == "" && a.String() == r.Source
	}
	p, err := netip.ParsePrefix(r.Source)
	return err == nil && p.Masked() == p && p.String() == r.Source
}

// AddRefusalCounts adds counts to the refusal counts of their source and
// minute in one transaction, and prunes them to the newest
// limits.AuditMaxRefusalRows and to limits.AuditMaxAge before now. The
// audit's entries are never touched. If any count breaks the log's
// grammar nothing is written and the error is InvalidArgument.
func (s *Store) AddRefusalCounts(counts []RefusalCount, now time.Time) error {
	if err := checkNow(now); err != nil {
		return err
	}
	for i := range counts {
		if !validRefusalCount(&counts[i]) {
			return errRefusalCount()
		}
	}
	keep, age := s.auditRefusalLimits()
	cutoff := now.Add(-age)
	if !storable(cutoff) {
		cutoff = minTime
	}
	return s.inTx(func(ctx context.Context, tx *txn) error {
		if len(counts) > 0 {
			stmt, err := tx.PrepareContext(ctx, `INSERT INTO audit_refusals(minute, source, count) VALUES (?, ?, ?)
				ON CONFLICT(minute, source) DO UPDATE SET count = audit_refusals.count + excluded.count`)
			if err != nil {
				return err
			}
			defer stmt.Close()
			for _, c := range counts {
				if _, err := stmt.ExecContext(ctx, c.Minute.UnixNano(), c.Source, c.Count); err != nil {
					return err
				}
			}
		}
		// Both deletes walk an index (the minute's, the seq key); rows
		// come at most one a source and minute, so there are few to prune.
		if _, err := tx.ExecContext(ctx, `DELETE FROM audit_refusals WHERE minute < ?`, cutoff.UnixNano()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM audit_refusals WHERE seq <= (SELECT max(seq) FROM audit_refusals) - ?`, keep)
		return err
	})
}

// auditRefusalLimits are the refusal counts' bounds (auditBound).
func (s *Store) auditRefusalLimits() (int, time.Duration) {
	_, age := s.auditLimits()
	if s.audit.refusalRows > 0 {
		return s.audit.refusalRows, age
	}
	return limits.AuditMaxRefusalRows, age
}

// RefusalCounts returns the newest n refusal counts, oldest first (by
// minute, then source). n must be between 1 and
// limits.AuditMaxRefusalRows. A row that breaks the log's grammar is an
// Internal error.
func (s *Store) RefusalCounts(n int) ([]RefusalCount, error) {
	if n < 1 || n > limits.AuditMaxRefusalRows {
		return nil, errcode.New(errcode.InvalidArgument, "the number of refusal counts must be between 1 and %d", limits.AuditMaxRefusalRows)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, `SELECT minute, source, count FROM audit_refusals ORDER BY minute DESC, source DESC LIMIT ?`, n)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	out := []RefusalCount{}
	for rows.Next() {
		var minute int64
		var r RefusalCount
		if err := rows.Scan(&minute, &r.Source, &r.Count); err != nil {
			return nil, dbErr(err)
		}
		r.Minute = fromNanos(minute)
		if !validRefusalCount(&r) {
			return nil, errcode.New(errcode.Internal, "relay audit record is corrupt")
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(err)
	}
	slices.Reverse(out)
	return out, nil
}
