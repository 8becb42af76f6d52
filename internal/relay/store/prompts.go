package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/namechars"
)

// SecretPrompt is a request for secret input: process.input's
// secret_prompt, waiting for a person to type the input on its one-time
// panel page. It holds who asked and for which job, never the input: the
// relay hands that to the job as it arrives, and records only the job's
// answer (Result).
type SecretPrompt struct {
	TokenID   string
	Principal string
	Device    string
	ProcessID string
	// Prompt is the text shown to the person.
	Prompt    string
	CreatedAt time.Time
	ExpiresAt time.Time
	State     PromptState
	// Result is the tool result the device gave for the input (done), or
	// the failure that ended it (failed): process.input's as encoded.
	Result []byte
}

// PromptState is where a secret prompt stands.
type PromptState string

const (
	// PromptPending: nobody has typed the input yet.
	PromptPending PromptState = "pending"
	// PromptTaken: a person typed it and the relay is handing it to the job.
	PromptTaken PromptState = "taken"
	// PromptDone and PromptFailed: the job's answer (or the failure) is in
	// Result.
	PromptDone   PromptState = "done"
	PromptFailed PromptState = "failed"
	// PromptDeclined: the person declined in their MCP client.
	PromptDeclined PromptState = "declined"
)

const (
	promptPrefix = "ccp_"
	// MaxProcessIDBytes bounds the job a secret prompt names.
	MaxProcessIDBytes = 128
	// MaxPromptResultBytes bounds the answer recorded for a prompt; a
	// process.input result without output is a few hundred bytes.
	MaxPromptResultBytes = 4 << 10
)

// errPrompt is the one refusal of a prompt ID: unknown, expired or used.
func errPrompt() error {
	return errcode.New(errcode.NotFound, "this secret prompt is unknown, used or expired")
}

// validPromptID checks a prompt ID's shape only; its hash decides.
func validPromptID(id string) bool {
	return strings.HasPrefix(id, promptPrefix) && validB64Secret(id[len(promptPrefix):])
}

// CreateSecretPrompt records p (TokenID, Principal, Device, ProcessID,
// Prompt) as pending until limits.SecretPromptTTL from now and returns its
// ID: the capability in its panel page's URL, stored only as a hash. A
// token may have limits.SecretPromptsPerToken prompts pending at once; the
// next is RateLimited.
func (s *Store) CreateSecretPrompt(p SecretPrompt, now time.Time) (string, error) {
	if !namechars.Printable(p.Prompt, limits.SecretPromptMaxBytes) || p.Prompt == "" {
		return "", errcode.New(errcode.InvalidArgument, "secret_prompt must be printable UTF-8 of 1 to %d bytes", limits.SecretPromptMaxBytes)
	}
	if !namechars.Printable(p.ProcessID, MaxProcessIDBytes) || p.ProcessID == "" {
		return "", errcode.New(errcode.InvalidArgument, "process_id must be printable text of 1 to %d bytes", MaxProcessIDBytes)
	}
	exp, err := expiry(now, limits.SecretPromptTTL)
	if err != nil {
		return "", err
	}
	id := promptPrefix + randomB64()
	err = s.inTx(func(ctx context.Context, tx *txn) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM secret_prompts WHERE expires_at < ?`, now.Add(-codeGCAge).UnixNano()); err != nil {
			return err
		}
		var waiting int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM secret_prompts WHERE token_id = ? AND state = ? AND expires_at > ?`,
			p.TokenID, string(PromptPending), now.UnixNano()).Scan(&waiting); err != nil {
			return err
		}
		if waiting >= limits.SecretPromptsPerToken {
			return errcode.New(errcode.RateLimited, "this client token has %d secret prompts waiting for a person already; wait until one is answered, declined or expired (%s)",
				limits.SecretPromptsPerToken, limits.SecretPromptTTL)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO secret_prompts(hash, token_id, principal, device_id, process_id, prompt, created_at, expires_at, state)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			hashSecret(id), p.TokenID, p.Principal, p.Device, p.ProcessID, p.Prompt, now.UnixNano(), exp.UnixNano(), string(PromptPending))
		return err
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// SecretPrompt returns the prompt with this ID, in whatever state; an
// unknown ID, and a pending or taken one past its expiry, are NotFound.
func (s *Store) SecretPrompt(id string, now time.Time) (*SecretPrompt, error) {
	if !validPromptID(id) {
		return nil, errPrompt()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var (
		p                SecretPrompt
		created, expires int64
		state            string
		result           []byte
	)
	err := s.db.QueryRowContext(ctx, `SELECT token_id, principal, device_id, process_id, prompt, created_at, expires_at, state, result
		FROM secret_prompts WHERE hash = ?`, hashSecret(id)).
		Scan(&p.TokenID, &p.Principal, &p.Device, &p.ProcessID, &p.Prompt, &created, &expires, &state, &result)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errPrompt()
	}
	if err != nil {
		return nil, dbErr(err)
	}
	p.CreatedAt, p.ExpiresAt, p.State, p.Result = fromNanos(created), fromNanos(expires), PromptState(state), result
	if (p.State == PromptPending || p.State == PromptTaken) && !now.Before(p.ExpiresAt) {
		return nil, errPrompt()
	}
	return &p, nil
}

// TakeSecretPrompt moves a pending, unexpired prompt to taken, once: of
// two people (or replicas) submitting at once, one wins and the other is
// refused like an unknown ID.
func (s *Store) TakeSecretPrompt(id string, now time.Time) (*SecretPrompt, error) {
	return s.movePrompt(id, PromptPending, PromptTaken, nil, now)
}

// FinishSecretPrompt records the job's answer to a taken prompt's input
// (or the failure that ended it), and ends the prompt: its text is
// forgotten, its answer kept for the asking call.
func (s *Store) FinishSecretPrompt(id string, failed bool, result []byte, now time.Time) error {
	if len(result) > MaxPromptResultBytes {
		return errcode.New(errcode.Internal, "a secret prompt's answer is over %d bytes", MaxPromptResultBytes)
	}
	to := PromptDone
	if failed {
		to = PromptFailed
	}
	_, err := s.movePrompt(id, PromptTaken, to, result, now)
	return err
}

// DeclineSecretPrompt ends a pending prompt whose person declined.
func (s *Store) DeclineSecretPrompt(id string, now time.Time) error {
	_, err := s.movePrompt(id, PromptPending, PromptDeclined, nil, now)
	return err
}

// movePrompt moves a prompt from one state to the next, once, and returns
// it as it was; a prompt that is not in from, or has expired, is errPrompt.
// Leaving taken, an expired prompt may still finish: the input reached the
// job, and its answer belongs to the asking call.
func (s *Store) movePrompt(id string, from, to PromptState, result []byte, now time.Time) (*SecretPrompt, error) {
	if !validPromptID(id) {
		return nil, errPrompt()
	}
	if err := checkNow(now); err != nil {
		return nil, err
	}
	hash := hashSecret(id)
	var p *SecretPrompt
	err := s.inTx(func(ctx context.Context, tx *txn) error {
		var (
			created, expires int64
			q                SecretPrompt
		)
		err := tx.QueryRowContext(ctx, `SELECT token_id, principal, device_id, process_id, prompt, created_at, expires_at
			FROM secret_prompts WHERE hash = ? AND state = ?`, hash, string(from)).
			Scan(&q.TokenID, &q.Principal, &q.Device, &q.ProcessID, &q.Prompt, &created, &expires)
		if errors.Is(err, sql.ErrNoRows) || err == nil && from == PromptPending && now.UnixNano() >= expires {
			return errPrompt()
		}
		if err != nil {
			return err
		}
		prompt := q.Prompt
		if to != PromptTaken {
			prompt = ""
		}
		res, err := tx.ExecContext(ctx, `UPDATE secret_prompts SET state = ?, result = ?, prompt = ? WHERE hash = ? AND state = ?`,
			string(to), result, prompt, hash, string(from))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err != nil {
				return err
			}
			return errPrompt()
		}
		q.CreatedAt, q.ExpiresAt, q.State = fromNanos(created), fromNanos(expires), from
		p = &q
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}
