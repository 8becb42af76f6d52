package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/principal"
)

// Token is a client token's record. Its secret is never stored; only
// CreateToken's return value holds it.
type Token struct {
	// ID is "tok_" and 12 lowercase hex characters; it is not secret.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Devices are the token's device scope: device names or IDs, or "*".
	Devices []string `json:"devices"`
	// Tools are the token's tool scope: exact tool names, "prefix.*", or "*".
	Tools []string `json:"tools"`
	// Principal names whose jobs the token acts on (README); several
	// tokens may share one. It defaults to the token's ID.
	Principal string     `json:"principal"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// Kind is TokenStatic for a token made by `relay token create`, and
	// TokenOAuth for a connection a person allowed on the panel's consent
	// page, whose client holds access and refresh tokens instead of a
	// bearer string of its own.
	Kind string `json:"kind"`
	// Client and ClientID name an OAuth connection's client; Admin is who
	// consented.
	Client   string `json:"client,omitempty"`
	ClientID string `json:"client_id,omitempty"`
	Admin    string `json:"admin,omitempty"`
	// Resource is the MCP URL an OAuth connection's tokens are for: a
	// request elsewhere is refused with them.
	Resource string `json:"resource,omitempty"`
	// LastUsedAt is when the token's last audited call reached the relay
	// (Tokens fills it; AuthToken does not).
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// The kinds of token.
const (
	TokenStatic = "static"
	TokenOAuth  = "oauth"
)

const (
	clientTokenPrefix = "cct_"
	tokenIDPrefix     = "tok_"
	tokenIDHexLen     = 12
	tokenIDLen        = len(tokenIDPrefix) + tokenIDHexLen
	// bearerLen is the length of "cct_<id>_<43 base64url chars>".
	bearerLen = len(clientTokenPrefix) + tokenIDLen + 1 + 43
	// MaxScopeEntries bounds each of a token's scope lists.
	MaxScopeEntries = 256
)

func errClientToken() error {
	return errcode.New(errcode.PermissionDenied, "client token is invalid, expired or revoked")
}

func errNoToken() error { return errcode.New(errcode.NotFound, "no such client token") }

// normalizeScope checks a scope list and drops duplicate entries, keeping
// the first occurrence's order. valid judges one entry.
func normalizeScope(what string, entries []string, valid func(string) bool) ([]string, error) {
	if len(entries) == 0 {
		return nil, errcode.New(errcode.InvalidArgument, "%s scope must name at least one entry", what)
	}
	if len(entries) > MaxScopeEntries {
		return nil, errcode.New(errcode.InvalidArgument, "%s scope has more than %d entries", what, MaxScopeEntries)
	}
	seen := make(map[string]bool, len(entries))
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		if !valid(e) {
			return nil, errcode.New(errcode.InvalidArgument, "%s scope has an invalid entry", what)
		}
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out, nil
}

// validDeviceScope accepts "*" or anything that can be a device name or ID
// (only tool entries may end in ".*").
func validDeviceScope(e string) bool { return e == "*" || ValidName(e) }

// validToolScope accepts "*", an exact tool name, or "prefix.*": the
// scope grammar of package authz, which matches these entries.
func validToolScope(e string) bool { return authz.ValidScope(e) }

// TokenSpec is what a new client token is: its name, scopes, principal
// (empty: the token's own ID) and lifetime.
type TokenSpec struct {
	Name      string
	Devices   []string
	Tools     []string
	Principal string
	TTL       time.Duration
}

// CreateToken creates a client token valid for spec.TTL from now, scoped to
// spec's devices and tools, and returns its record and its bearer string
// ("cct_<id>_<43 base64url characters>"), which is shown once: only its
// hash is stored. Empty scopes, a non-positive ttl, an invalid name and an
// invalid principal (principal.Valid: "local" is the machine's owner's) are
// InvalidArgument.
func (s *Store) CreateToken(spec TokenSpec, now time.Time) (*Token, string, error) {
	name, devices, tools, ttl := spec.Name, spec.Devices, spec.Tools, spec.TTL
	if spec.Principal != "" && !principal.Valid(spec.Principal) {
		return nil, "", errcode.New(errcode.InvalidArgument, "principal must be 1 to %d characters of letters, digits, '.', '_' and '-', and not \"local\"", principal.MaxBytes)
	}
	if !ValidName(name) {
		return nil, "", errcode.New(errcode.InvalidArgument, "token name must be 1 to %d characters of letters, digits, '.', '_' and '-'", MaxNameBytes)
	}
	// Device IDs are stored lower case: an ID in the scope matches in any
	// case the owner typed it, as FindDevice does.
	devices = slices.Clone(devices)
	for i, d := range devices {
		if IsDeviceID(d) {
			devices[i] = strings.ToLower(d)
		}
	}
	devs, err := normalizeScope("device", devices, validDeviceScope)
	if err != nil {
		return nil, "", err
	}
	tls, err := normalizeScope("tool", tools, validToolScope)
	if err != nil {
		return nil, "", err
	}
	exp, err := expiry(now, ttl)
	if err != nil {
		return nil, "", err
	}
	devJSON, err := json.Marshal(devs)
	if err != nil {
		return nil, "", errcode.Wrap(errcode.Internal, err, "cannot encode token scope")
	}
	toolJSON, err := json.Marshal(tls)
	if err != nil {
		return nil, "", errcode.Wrap(errcode.Internal, err, "cannot encode token scope")
	}
	t := &Token{Name: name, Devices: devs, Tools: tls, Kind: TokenStatic,
		CreatedAt: fromNanos(now.UnixNano()), ExpiresAt: fromNanos(exp.UnixNano())}
	var bearer string
	err = s.inTx(func(ctx context.Context, tx *txn) error {
		// A 48-bit ID collides rarely; try again rather than fail.
		for range 8 {
			t.ID = tokenIDPrefix + randomHex(tokenIDHexLen/2)
			t.Principal = principalOf(t.ID, spec.Principal)
			bearer = clientTokenPrefix + t.ID + "_" + randomB64()
			res, err := tx.ExecContext(ctx, `INSERT INTO tokens(id, name, secret_hash, devices, tools, created_at, expires_at, principal)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING`,
				t.ID, name, hashSecret(bearer), string(devJSON), string(toolJSON), now.UnixNano(), exp.UnixNano(), spec.Principal)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 1 {
				return err
			}
		}
		return errcode.New(errcode.Internal, "cannot allocate a token ID")
	})
	if err != nil {
		return nil, "", err
	}
	return t, bearer, nil
}

// parseBearer returns the token ID of a well-formed bearer string, or ""
// when it is malformed. Only lengths and character classes are checked;
// the secret part is judged by its hash.
func parseBearer(bearer string) string {
	if len(bearer) != bearerLen || !strings.HasPrefix(bearer, clientTokenPrefix) {
		return ""
	}
	id := bearer[len(clientTokenPrefix) : len(clientTokenPrefix)+tokenIDLen]
	rest := bearer[len(clientTokenPrefix)+tokenIDLen:]
	if !validTokenID(id) || rest[0] != '_' || !validB64Secret(rest[1:]) {
		return ""
	}
	return id
}

func validTokenID(id string) bool {
	return len(id) == tokenIDLen && strings.HasPrefix(id, tokenIDPrefix) && isLowerHex(id[len(tokenIDPrefix):])
}

const tokenColumns = `tokens.id, tokens.name, tokens.devices, tokens.tools, tokens.created_at, tokens.expires_at, tokens.revoked_at,
	tokens.principal, tokens.kind, tokens.client_id, tokens.client_name, tokens.admin, tokens.resource`

// principalOf is a token's principal: the stored one, or its own ID when
// none was named (also for tokens from before principals).
func principalOf(id, stored string) string {
	if stored == "" {
		return id
	}
	return stored
}

func scanToken(r rowScanner, extra ...any) (*Token, error) {
	var (
		t                Token
		devs, tls        string
		created, expires int64
		revoked          sql.NullInt64
		prin             string
	)
	if err := r.Scan(append([]any{&t.ID, &t.Name, &devs, &tls, &created, &expires, &revoked, &prin,
		&t.Kind, &t.ClientID, &t.Client, &t.Admin, &t.Resource}, extra...)...); err != nil {
		return nil, err
	}
	t.Principal = principalOf(t.ID, prin)
	if json.Unmarshal([]byte(devs), &t.Devices) != nil || json.Unmarshal([]byte(tls), &t.Tools) != nil {
		return nil, errcode.New(errcode.Internal, "client token record is corrupt")
	}
	if t.Devices == nil {
		t.Devices = []string{}
	}
	if t.Tools == nil {
		t.Tools = []string{}
	}
	t.CreatedAt = fromNanos(created)
	t.ExpiresAt = fromNanos(expires)
	if revoked.Valid {
		r := fromNanos(revoked.Int64)
		t.RevokedAt = &r
	}
	return &t, nil
}

// AuthToken resolves a client bearer string to its token: a static
// token's, or an OAuth access token's connection (its Resource says where
// it may be used, its ExpiresAt is the access token's when that comes
// first). A malformed, unknown, revoked or expired (at now) token is
// PermissionDenied, all with one message. It reads the database on every
// call, so a revocation by any process takes effect on the next call.
func (s *Store) AuthToken(bearer string, now time.Time) (*Token, error) {
	if strings.HasPrefix(bearer, accessPrefix) {
		return s.authAccess(bearer, now)
	}
	id := parseBearer(bearer)
	if id == "" {
		return nil, errClientToken()
	}
	hash := hashSecret(bearer)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var stored []byte
	t, err := scanToken(s.db.QueryRowContext(ctx, `SELECT `+tokenColumns+`, secret_hash FROM tokens WHERE id = ?`, id), &stored)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errClientToken()
	}
	if err != nil {
		return nil, dbErr(err)
	}
	if t.Kind != TokenStatic || !sameHash(stored, hash) || t.RevokedAt != nil || !now.Before(t.ExpiresAt) {
		return nil, errClientToken()
	}
	return t, nil
}

// Tokens returns every client token (revoked and expired ones too, OAuth
// connections too), newest first, each with when it was last used.
func (s *Store) Tokens() ([]Token, error) {
	return queryAll(s, `SELECT `+tokenColumns+`, u.at FROM tokens LEFT JOIN token_use u ON u.token_id = tokens.id
		ORDER BY tokens.created_at DESC, tokens.rowid DESC`,
		func(r rowScanner) (*Token, error) {
			var used sql.NullInt64
			t, err := scanToken(r, &used)
			if err == nil && used.Valid {
				at := fromNanos(used.Int64)
				t.LastUsedAt = &at
			}
			return t, err
		})
}

// RevokeToken revokes client token id at now. Revoking a revoked token
// succeeds and keeps the first revocation time. NotFound if there is no
// such token.
func (s *Store) RevokeToken(id string, now time.Time) error {
	if !validTokenID(id) {
		return errNoToken()
	}
	if err := checkNow(now); err != nil {
		return err
	}
	return s.updateOne(errNoToken, `UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`, now.UnixNano(), id)
}

// TokenChanges returns the token-change counter: a number that changes
// whenever a token is revoked, deleted or otherwise changed, by any
// process, and not when one is created or checked. A relay that checked a
// token when the counter read n may rely on that check (but for expiry,
// which time alone brings) for as long as the counter still reads n: one
// integer read by primary key rather than the token.
func (s *Store) TokenChanges() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT n FROM token_changes WHERE one = 1`).Scan(&n); err != nil {
		return 0, dbErr(err)
	}
	return n, nil
}
