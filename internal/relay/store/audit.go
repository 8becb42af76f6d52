package store

import (
	"context"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/uuidtext"
)

// AuditEntry is one client call in the relay's audit log (README). It is
// content-free: it never holds a call's arguments, result or output, and
// every field has a narrow grammar that AppendAudit and Audit enforce.
type AuditEntry struct {
	// Seq orders the log; AppendAudit assigns it.
	Seq int64 `json:"seq"`
	// At is when the call reached the relay.
	At time.Time `json:"at"`
	// Principal, TokenID are whose call it was; empty only in entries of
	// relays that audited each request without a valid client token one
	// by one (RefusalCount counts them now).
	Principal string `json:"principal"`
	TokenID   string `json:"token_id"`
	// Device is the ID of the device the call was for; empty when no device
	// matched.
	Device string `json:"device"`
	// Job is the ID of the job the call was about (a canonical UUID),
	// empty when it named none: a job's ID, never the call's content.
	Job string `json:"job,omitempty"`
	// Tool is a tool name of the relay's table or "unknown".
	Tool string `json:"tool"`
	// Outcome is AuditOK or AuditFailed; Code is the error code of a failed
	// call.
	Outcome    string `json:"outcome"`
	Code       string `json:"code,omitempty"`
	DurationUS int64  `json:"duration_us"`
}

// The outcomes of an audited call.
const (
	AuditOK     = "ok"
	AuditFailed = "failed"
)

const (
	// maxAuditText bounds a principal in the log.
	maxAuditText = 256
	// maxAuditWord bounds a tool name or an error code in the log.
	maxAuditWord = 64
)

const auditColumns = `seq, at, principal, token_id, device, job, tool, outcome, code, duration_us`

func errAuditEntry() error {
	return errcode.New(errcode.InvalidArgument, "audit entry is not a content-free record")
}

// auditBound is how much of the log is kept; zero fields mean the bounds of
// docs/limits.md. Tests set it (the narrow seam for a small log).
type auditBound struct {
	entries     int
	refusalRows int
	age         time.Duration
}

func (s *Store) auditLimits() (int, time.Duration) {
	n, age := s.audit.entries, s.audit.age
	if n <= 0 {
		n = limits.AuditMaxEntries
	}
	if age <= 0 {
		age = limits.AuditMaxAge
	}
	return n, age
}

// AppendAudit adds entries to the audit log in one transaction (Seq is
// assigned in order; the rest is kept) and prunes the log to the newest
// limits.AuditMaxEntries entries and to limits.AuditMaxAge before now.
// With no entries it only prunes. If any entry breaks the log's grammar
// nothing is written and the error is InvalidArgument.
func (s *Store) AppendAudit(entries []AuditEntry, now time.Time) error {
	if err := checkNow(now); err != nil {
		return err
	}
	for i := range entries {
		if !validAudit(&entries[i]) {
			return errAuditEntry()
		}
	}
	keep, age := s.auditLimits()
	cutoff := now.Add(-age)
	if !storable(cutoff) {
		cutoff = minTime
	}
	more := false
	err := s.inTx(func(ctx context.Context, tx *txn) error {
		if len(entries) > 0 {
			stmt, err := tx.PrepareContext(ctx, `INSERT INTO audit(at, principal, token_id, device, job, tool, outcome, code, duration_us)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
			if err != nil {
				return err
			}
			defer stmt.Close()
			for _, e := range entries {
				if _, err := stmt.ExecContext(ctx, e.At.UnixNano(), e.Principal, e.TokenID, e.Device, e.Job,
					e.Tool, e.Outcome, e.Code, e.DurationUS); err != nil {
					return err
				}
			}
			if err := noteUse(ctx, tx, entries); err != nil {
				return err
			}
		}
		// Both deletes walk an index (audit_at, the seq key): cheap when
		// there is nothing to prune. Seqs only grow, so the newest `keep`
		// rows lie within `keep` of the largest.
		var err error
		if more, err = pruneAuditAge(ctx, tx, cutoff); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM audit WHERE seq <= (SELECT max(seq) FROM audit) - ?`, keep)
		return err
	})
	// A relay back after a long pause may find a whole log expired: it goes
	// in batches, each transaction short, not in one that could outlast
	// the operation bound.
	for err == nil && more {
		err = s.inTx(func(ctx context.Context, tx *txn) error {
			var err error
			more, err = pruneAuditAge(ctx, tx, cutoff)
			return err
		})
	}
	return err
}

// noteUse keeps, per token, its last audited call's time: the batch's
// latest, one row per token in it, so "last used" costs no write per
// call and does not move the token-change counter.
func noteUse(ctx context.Context, tx *txn, entries []AuditEntry) error {
	last := map[string]int64{}
	for _, e := range entries {
		if e.TokenID != "" && e.At.UnixNano() > last[e.TokenID] {
			last[e.TokenID] = e.At.UnixNano()
		}
	}
	for id, at := range last {
		if _, err := tx.ExecContext(ctx, `INSERT INTO token_use(token_id, at) VALUES (?, ?)
			ON CONFLICT(token_id) DO UPDATE SET at = excluded.at WHERE excluded.at > token_use.at`, id, at); err != nil {
			return err
		}
	}
	return nil
}

// auditPruneBatch bounds the expired entries one transaction deletes.
const auditPruneBatch = 5000

// pruneAuditAge deletes up to auditPruneBatch entries older than cutoff,
// oldest first, and reports whether more may be left.
func pruneAuditAge(ctx context.Context, tx *txn, cutoff time.Time) (bool, error) {
	res, err := tx.ExecContext(ctx, `DELETE FROM audit WHERE seq IN
		(SELECT seq FROM audit WHERE at < ? ORDER BY at LIMIT ?)`, cutoff.UnixNano(), auditPruneBatch)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == auditPruneBatch, err
}

// Audit returns the newest n entries of the audit log, oldest first. n
// must be between 1 and limits.AuditMaxEntries. A row that breaks the
// log's grammar (a database edited by hand) is an Internal error.
func (s *Store) Audit(n int) ([]AuditEntry, error) {
	if n < 1 || n > limits.AuditMaxEntries {
		return nil, errcode.New(errcode.InvalidArgument, "the number of audit entries must be between 1 and %d", limits.AuditMaxEntries)
	}
	out, err := queryAll(s, `SELECT `+auditColumns+` FROM audit ORDER BY seq DESC LIMIT ?`, scanAudit, n)
	if err != nil {
		return nil, err
	}
	slices.Reverse(out)
	return out, nil
}

// decodeAudit makes an entry of one stored row's columns, refusing a row
// that breaks the log's grammar with an Internal error.
func decodeAudit(seq, at int64, principal, token, device, job, tool, outcome, code string, durationUS int64) (*AuditEntry, error) {
	e := &AuditEntry{Seq: seq, At: fromNanos(at), Principal: principal, TokenID: token, Device: device, Job: job,
		Tool: tool, Outcome: outcome, Code: code, DurationUS: durationUS}
	if seq < 1 || !validAudit(e) {
		return nil, errcode.New(errcode.Internal, "relay audit record is corrupt")
	}
	return e, nil
}

// validAudit checks an entry's fields against the log's grammar: nothing
// in it can carry a call's content or upset a terminal.
func validAudit(e *AuditEntry) bool {
	if !storable(e.At) || e.DurationUS < 0 {
		return false
	}
	if e.Principal != "" && !auditText(e.Principal) {
		return false
	}
	if e.TokenID != "" && !validTokenID(e.TokenID) {
		return false
	}
	if e.Device != "" && !ValidName(e.Device) {
		return false
	}
	if e.Job != "" && !uuidtext.Canonical(e.Job) {
		return false
	}
	if !auditWord(e.Tool, '.') {
		return false
	}
	switch e.Outcome {
	case AuditOK:
		return e.Code == ""
	case AuditFailed:
		return auditWord(e.Code, 0)
	}
	return false
}

// auditText accepts bounded UTF-8 of printable characters without spaces:
// no control, format (bidirectional overrides) or invisible characters.
func auditText(s string) bool {
	if len(s) > maxAuditText || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || r == ' ' {
			return false
		}
	}
	return true
}

// auditWord accepts a snake_case word of lowercase letters, digits and
// '_' (and sep, when not 0) that starts with a letter: a tool name or an
// error code.
func auditWord(s string, sep byte) bool {
	if len(s) == 0 || len(s) > maxAuditWord || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || sep != 0 && c == sep) {
			return false
		}
	}
	return true
}

// UnknownAuditCode stands in the log for an error code that is not a
// snake_case word (a misbehaving device's, or none at all).
const UnknownAuditCode = "unknown"

// AuditCode returns code when the log can hold it as an error code, else
// UnknownAuditCode.
func AuditCode(code string) string {
	if auditWord(code, 0) {
		return code
	}
	return UnknownAuditCode
}

// AuditFilter selects audit entries: each set field must match exactly;
// Before, when positive, keeps entries older than that sequence number.
type AuditFilter struct {
	Principal, Device, Job, Tool, Outcome string
	Before                                int64
}

// AuditPage returns up to n entries matching f, newest first: a page of
// the log as the panel shows it. The next page is f with Before set to
// the last entry's Seq.
func (s *Store) AuditPage(f AuditFilter, n int) ([]AuditEntry, error) {
	if n < 1 || n > limits.AuditMaxEntries {
		return nil, errcode.New(errcode.InvalidArgument, "the number of audit entries must be between 1 and %d", limits.AuditMaxEntries)
	}
	var (
		where []string
		args  []any
	)
	for _, c := range []struct{ column, value string }{
		{"principal", f.Principal}, {"device", f.Device}, {"job", f.Job}, {"tool", f.Tool}, {"outcome", f.Outcome},
	} {
		if c.value != "" {
			where = append(where, c.column+" = ?")
			args = append(args, c.value)
		}
	}
	if f.Before > 0 {
		where = append(where, "seq < ?")
		args = append(args, f.Before)
	}
	query := `SELECT ` + auditColumns + ` FROM audit`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	args = append(args, n)
	return queryAll(s, query+` ORDER BY seq DESC LIMIT ?`, scanAudit, args...)
}

func scanAudit(r rowScanner) (*AuditEntry, error) {
	var (
		seq, at, dur                                       int64
		principal, token, device, job, tool, outcome, code string
	)
	if err := r.Scan(&seq, &at, &principal, &token, &device, &job, &tool, &outcome, &code, &dur); err != nil {
		return nil, err
	}
	return decodeAudit(seq, at, principal, token, device, job, tool, outcome, code, dur)
}

// AuditCounts returns how many calls the log holds since the given time,
// and how many of them failed.
func (s *Store) AuditCounts(since time.Time) (calls, failed int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	err = s.db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(CASE WHEN outcome = ? THEN 1 ELSE 0 END), 0) FROM audit WHERE at >= ?`,
		AuditFailed, since.UnixNano()).Scan(&calls, &failed)
	if err != nil {
		return 0, 0, dbErr(err)
	}
	return calls, failed, nil
}
