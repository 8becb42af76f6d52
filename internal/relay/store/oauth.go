package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/namechars"
	"github.com/commandcore/commandcore/internal/principal"
)

// The OAuth side of the state: the relay as an authorization server keeps
// here everything a step of a client's sign-in needs, so any replica
// serves any step. A connection a person allowed is a token of kind
// TokenOAuth; its client holds an access token (an hour) and a refresh
// token (rotated on every use) that name it. Codes, request IDs, access
// and refresh tokens are kept only as hashes.

// OAuthClient is a client that registered dynamically (RFC 7591).
type OAuthClient struct {
	ID           string    `json:"client_id"`
	Name         string    `json:"client_name"`
	RedirectURIs []string  `json:"redirect_uris"`
	CreatedAt    time.Time `json:"created_at"`
}

// AuthRequest is an authorization request the relay checked, waiting for
// a person's consent.
type AuthRequest struct {
	ClientID    string
	ClientName  string
	RedirectURI string
	State       string
	// Challenge is the PKCE S256 code challenge.
	Challenge string
	// Resource is the MCP URL the tokens will be for.
	Resource  string
	Scope     string
	CreatedAt time.Time
	ExpiresAt time.Time
	// Source is the client's source key (an address, an IPv6 /64), against
	// which its pending requests count; kept for that alone.
	Source string
}

// ErrRegistrationsFull refuses a registration while as many as
// limits.OAuthUnusedClientsMax registrations wait for their first use:
// anyone may register, so what they hold is bounded.
var ErrRegistrationsFull = errcode.New(errcode.Unavailable, "too many client registrations wait for their first use; try again later")

// ErrPendingFull refuses an authorization request past the bounds on the
// requests that wait for a person: per source, per client, in all.
var ErrPendingFull = errcode.New(errcode.RateLimited, "too many authorization requests wait for a person; try again in a few minutes")

// ConnectionSpec is what a person allowed: the scopes of a static
// token's, the principal its jobs belong to, how long it lasts, and who
// they are.
type ConnectionSpec struct {
	Devices   []string
	Tools     []string
	Principal string
	TTL       time.Duration
	Admin     string
}

// AuthCode is what an authorization code stands for, as the token
// endpoint checks it.
type AuthCode struct {
	ClientID    string
	ClientName  string
	RedirectURI string
	Challenge   string
	Resource    string
	Spec        ConnectionSpec
}

// TokenPair is what a client gets for a code or a refresh token.
type TokenPair struct {
	Access          string
	Refresh         string
	AccessExpiresAt time.Time
}

const (
	clientIDPrefix = "ccc_"
	clientIDHexLen = 32
	requestPrefix  = "car_"
	codePrefix     = "cac_"
	accessPrefix   = "cca_"
	refreshPrefix  = "ccr_"
	// oauthBearerLen is the length of "cca_<token id>_<43 base64url>".
	oauthBearerLen = len(accessPrefix) + tokenIDLen + 1 + 43
	// MaxClientNameBytes bounds a client's name as kept and shown.
	MaxClientNameBytes = 128
	// MaxOAuthTextBytes bounds a redirect URI, resource or scope.
	MaxOAuthTextBytes = 2048
	// MaxSourceBytes bounds a source key: an IPv6 /64 is the longest.
	MaxSourceBytes = len("ffff:ffff:ffff:ffff::/64")
	// pkceChallengeLen is an S256 challenge: 32 bytes in base64url.
	pkceChallengeLen = 43
	// accessKind and refreshKind tell oauth_tokens' rows apart.
	accessKind  = "access"
	refreshKind = "refresh"
)

// ErrCodeReused is a code presented a second time: the connection its
// first use made is revoked. ErrRefreshReused is a spent refresh token
// presented again: its connection is revoked, since whoever holds one of
// the two copies is not the client.
var (
	ErrCodeReused    = errcode.New(errcode.PermissionDenied, "authorization code was already used")
	ErrRefreshReused = errcode.New(errcode.PermissionDenied, "refresh token was already used; the connection is revoked")
)

func errGrant() error {
	return errcode.New(errcode.PermissionDenied, "authorization grant is invalid, expired or revoked")
}

func errNoClient() error { return errcode.New(errcode.NotFound, "no such OAuth client") }

func errNoRequest() error {
	return errcode.New(errcode.NotFound, "no such authorization request, or it was answered or expired")
}

// oauthText checks a field kept from a client's request: printable, and
// bounded.
func oauthText(s string, max int) bool { return namechars.Printable(s, max) }

// RegisterClient keeps a dynamic registration the caller validated and
// returns it with its new ID. Registrations no authorization ever used
// are removed after limits.OAuthUnusedClientTTL.
func (s *Store) RegisterClient(c OAuthClient, now time.Time) (*OAuthClient, error) {
	if err := checkNow(now); err != nil {
		return nil, err
	}
	if c.Name != "" && !oauthText(c.Name, MaxClientNameBytes) {
		return nil, errcode.New(errcode.InvalidArgument, "client name must be printable text of at most %d bytes", MaxClientNameBytes)
	}
	if len(c.RedirectURIs) == 0 || len(c.RedirectURIs) > limits.OAuthMaxRedirectURIs {
		return nil, errcode.New(errcode.InvalidArgument, "a client has 1 to %d redirect URIs", limits.OAuthMaxRedirectURIs)
	}
	for _, u := range c.RedirectURIs {
		if u == "" || !oauthText(u, MaxOAuthTextBytes) {
			return nil, errcode.New(errcode.InvalidArgument, "a redirect URI must be printable text of at most %d bytes", MaxOAuthTextBytes)
		}
	}
	uris, err := json.Marshal(c.RedirectURIs)
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "cannot encode redirect URIs")
	}
	out := c
	out.CreatedAt = fromNanos(now.UnixNano())
	err = s.inTx(func(ctx context.Context, tx *txn) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM oauth_clients WHERE used_at IS NULL AND created_at <= ?`,
			now.Add(-limits.OAuthUnusedClientTTL).UnixNano()); err != nil {
			return err
		}
		var unused int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM oauth_clients WHERE used_at IS NULL`).Scan(&unused); err != nil {
			return err
		}
		if unused >= limits.OAuthUnusedClientsMax {
			return ErrRegistrationsFull
		}
		out.ID = clientIDPrefix + randomHex(clientIDHexLen/2)
		_, err := tx.ExecContext(ctx, `INSERT INTO oauth_clients(id, name, redirect_uris, created_at) VALUES (?, ?, ?, ?)`,
			out.ID, c.Name, string(uris), now.UnixNano())
		return err
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// IsRegisteredClientID reports whether id has the form of a dynamic
// registration's client ID (a client ID metadata document's is a URL).
func IsRegisteredClientID(id string) bool {
	return len(id) == len(clientIDPrefix)+clientIDHexLen && strings.HasPrefix(id, clientIDPrefix) && isLowerHex(id[len(clientIDPrefix):])
}

// RegisteredClient returns the dynamic registration with this ID:
// NotFound when there is none, or it was never used and is older than
// limits.OAuthUnusedClientTTL.
func (s *Store) RegisteredClient(id string, now time.Time) (*OAuthClient, error) {
	if !IsRegisteredClientID(id) {
		return nil, errNoClient()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var (
		c       = OAuthClient{ID: id}
		uris    string
		created int64
		used    sql.NullInt64
	)
	err := s.db.QueryRowContext(ctx, `SELECT name, redirect_uris, created_at, used_at FROM oauth_clients WHERE id = ?`, id).
		Scan(&c.Name, &uris, &created, &used)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoClient()
	}
	if err != nil {
		return nil, dbErr(err)
	}
	if json.Unmarshal([]byte(uris), &c.RedirectURIs) != nil {
		return nil, errcode.New(errcode.Internal, "OAuth client record is corrupt")
	}
	c.CreatedAt = fromNanos(created)
	if !used.Valid && !now.Before(c.CreatedAt.Add(limits.OAuthUnusedClientTTL)) {
		return nil, errNoClient()
	}
	return &c, nil
}

// CreateAuthRequest keeps a checked authorization request for
// limits.OAuthRequestTTL and returns its ID, the consent page's address.
func (s *Store) CreateAuthRequest(r AuthRequest, now time.Time) (string, error) {
	if r.ClientID == "" || r.RedirectURI == "" || r.Resource == "" || len(r.Challenge) != pkceChallengeLen ||
		!validB64Secret(r.Challenge) {
		return "", errcode.New(errcode.InvalidArgument, "an authorization request names its client, redirect URI, resource and S256 challenge")
	}
	for _, f := range []string{r.ClientID, r.RedirectURI, r.Resource, r.Scope} {
		if !oauthText(f, MaxOAuthTextBytes) {
			return "", errcode.New(errcode.InvalidArgument, "an authorization request's fields are printable text of at most %d bytes", MaxOAuthTextBytes)
		}
	}
	if r.State != "" && !oauthText(r.State, limits.OAuthStateMaxBytes) || r.ClientName != "" && !oauthText(r.ClientName, MaxClientNameBytes) ||
		len(r.Source) > MaxSourceBytes {
		return "", errcode.New(errcode.InvalidArgument, "an authorization request's state or client name is not printable text within bounds")
	}
	exp, err := expiry(now, limits.OAuthRequestTTL)
	if err != nil {
		return "", err
	}
	id := requestPrefix + randomB64()
	err = s.inTx(func(ctx context.Context, tx *txn) error {
		// A request is kept until its expiry, answered or not: an
		// unauthenticated request's row lasts minutes, not a day.
		if _, err := tx.ExecContext(ctx, `DELETE FROM oauth_requests WHERE expires_at <= ?`, now.UnixNano()); err != nil {
			return err
		}
		var all, source, client int
		if err := tx.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(CASE WHEN source = ? THEN 1 ELSE 0 END), 0),
			coalesce(sum(CASE WHEN client_id = ? THEN 1 ELSE 0 END), 0) FROM oauth_requests WHERE answered_at IS NULL`,
			r.Source, r.ClientID).Scan(&all, &source, &client); err != nil {
			return err
		}
		if all >= limits.OAuthPendingMax || source >= limits.OAuthPendingPerSource || client >= limits.OAuthPendingPerClient {
			return ErrPendingFull
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO oauth_requests(hash, client_id, client_name, redirect_uri, state, challenge, resource, scope, created_at, expires_at, source)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, hashSecret(id), r.ClientID, r.ClientName, r.RedirectURI, r.State,
			r.Challenge, r.Resource, r.Scope, now.UnixNano(), exp.UnixNano(), r.Source)
		return err
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

func validRequestID(id string) bool {
	return strings.HasPrefix(id, requestPrefix) && validB64Secret(id[len(requestPrefix):])
}

const requestColumns = `client_id, client_name, redirect_uri, state, challenge, resource, scope, created_at, expires_at`

func scanRequest(r rowScanner) (*AuthRequest, error) {
	var (
		a                AuthRequest
		created, expires int64
	)
	if err := r.Scan(&a.ClientID, &a.ClientName, &a.RedirectURI, &a.State, &a.Challenge, &a.Resource, &a.Scope, &created, &expires); err != nil {
		return nil, err
	}
	a.CreatedAt, a.ExpiresAt = fromNanos(created), fromNanos(expires)
	return &a, nil
}

// AuthRequest returns the request with this ID while it waits: NotFound
// once answered or expired.
func (s *Store) AuthRequest(id string, now time.Time) (*AuthRequest, error) {
	if !validRequestID(id) {
		return nil, errNoRequest()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	a, err := scanRequest(s.db.QueryRowContext(ctx, `SELECT `+requestColumns+` FROM oauth_requests
		WHERE hash = ? AND answered_at IS NULL AND expires_at > ?`, hashSecret(id), now.UnixNano()))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoRequest()
	}
	if err != nil {
		return nil, dbErr(err)
	}
	return a, nil
}

// answer marks the waiting request answered, once, and returns it.
func answer(ctx context.Context, tx *txn, id string, now time.Time) (*AuthRequest, error) {
	a, err := scanRequest(tx.QueryRowContext(ctx, `SELECT `+requestColumns+` FROM oauth_requests
		WHERE hash = ? AND answered_at IS NULL AND expires_at > ?`, hashSecret(id), now.UnixNano()))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoRequest()
	}
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE oauth_requests SET answered_at = ? WHERE hash = ?`, now.UnixNano(), hashSecret(id)); err != nil {
		return nil, err
	}
	return a, nil
}

// checkSpec judges what a person allowed as CreateToken judges a static
// token, and more: a connection's principal is never a panel admin's.
func checkSpec(spec ConnectionSpec) (devices, tools []string, err error) {
	if spec.Principal == "" || !principal.Valid(spec.Principal) || strings.HasPrefix(spec.Principal, "admin:") {
		return nil, nil, errcode.New(errcode.InvalidArgument, "a connection's principal must be 1 to %d characters of letters, digits, '.', '_' and '-', and not \"local\"", principal.MaxBytes)
	}
	if spec.TTL <= 0 || spec.TTL > limits.OAuthConnectionMax {
		return nil, nil, errcode.New(errcode.InvalidArgument, "a connection lasts at most %d days", int(limits.OAuthConnectionMax/(24*time.Hour)))
	}
	if !ValidAdminName(spec.Admin) {
		return nil, nil, errcode.New(errcode.InvalidArgument, "a connection names the admin who allowed it")
	}
	devs := make([]string, len(spec.Devices))
	for i, d := range spec.Devices {
		devs[i] = d
		if IsDeviceID(d) {
			devs[i] = strings.ToLower(d)
		}
	}
	if devices, err = normalizeScope("device", devs, validDeviceScope); err != nil {
		return nil, nil, err
	}
	if tools, err = normalizeScope("tool", spec.Tools, validToolScope); err != nil {
		return nil, nil, err
	}
	return devices, tools, nil
}

// ApproveAuthRequest answers the waiting request, once, with what the
// person allowed, and returns a code valid limits.OAuthCodeTTL that stands
// for it, with the request (its redirect URI and state).
func (s *Store) ApproveAuthRequest(id string, spec ConnectionSpec, now time.Time) (string, *AuthRequest, error) {
	if !validRequestID(id) {
		return "", nil, errNoRequest()
	}
	devices, tools, err := checkSpec(spec)
	if err != nil {
		return "", nil, err
	}
	devJSON, _ := json.Marshal(devices)
	toolJSON, _ := json.Marshal(tools)
	exp, err := expiry(now, limits.OAuthCodeTTL)
	if err != nil {
		return "", nil, err
	}
	code := codePrefix + randomB64()
	var req *AuthRequest
	err = s.inTx(func(ctx context.Context, tx *txn) error {
		var err error
		if req, err = answer(ctx, tx, id, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM oauth_codes WHERE expires_at < ?`, now.Add(-limits.OAuthConnectionMax).UnixNano()); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE oauth_clients SET used_at = ? WHERE id = ? AND used_at IS NULL`, now.UnixNano(), req.ClientID); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO oauth_codes(hash, client_id, client_name, redirect_uri, challenge, resource, devices, tools, principal, ttl, admin, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, hashSecret(code), req.ClientID, req.ClientName, req.RedirectURI,
			req.Challenge, req.Resource, string(devJSON), string(toolJSON), spec.Principal, int64(spec.TTL), spec.Admin, exp.UnixNano())
		return err
	})
	if err != nil {
		return "", nil, err
	}
	return code, req, nil
}

// DenyAuthRequest answers the waiting request, once, with a refusal.
func (s *Store) DenyAuthRequest(id string, now time.Time) (*AuthRequest, error) {
	if !validRequestID(id) {
		return nil, errNoRequest()
	}
	var req *AuthRequest
	err := s.inTx(func(ctx context.Context, tx *txn) error {
		var err error
		req, err = answer(ctx, tx, id, now)
		return err
	})
	return req, err
}

// RedeemAuthCode takes the code, once: verify judges what it stands for
// (the client, the redirect URI, the PKCE verifier) and, when it passes,
// the connection is made and its first tokens returned. A code is spent
// by its first presentation whatever verify says; a second presentation
// is ErrCodeReused and revokes the connection the first one made, which
// it returns with the error.
func (s *Store) RedeemAuthCode(code string, verify func(*AuthCode) error, now time.Time) (*Token, TokenPair, error) {
	if err := checkNow(now); err != nil {
		return nil, TokenPair{}, err
	}
	if !strings.HasPrefix(code, codePrefix) || !validB64Secret(code[len(codePrefix):]) {
		return nil, TokenPair{}, errGrant()
	}
	var (
		tok     *Token
		pair    TokenPair
		outcome error // decided and committed: the code stays spent
	)
	err := s.inTx(func(ctx context.Context, tx *txn) error {
		tok, pair, outcome = nil, TokenPair{}, nil
		var (
			c           AuthCode
			devs, tools string
			ttl, exp    int64
			used        sql.NullInt64
			issued      string
		)
		err := tx.QueryRowContext(ctx, `SELECT client_id, client_name, redirect_uri, challenge, resource, devices, tools, principal, ttl, admin, expires_at, used_at, token_id
			FROM oauth_codes WHERE hash = ?`, hashSecret(code)).Scan(&c.ClientID, &c.ClientName, &c.RedirectURI, &c.Challenge,
			&c.Resource, &devs, &tools, &c.Spec.Principal, &ttl, &c.Spec.Admin, &exp, &used, &issued)
		if errors.Is(err, sql.ErrNoRows) {
			outcome = errGrant()
			return nil
		}
		if err != nil {
			return err
		}
		if used.Valid {
			outcome = ErrCodeReused
			if issued == "" {
				return nil
			}
			if _, err = tx.ExecContext(ctx, `UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`, now.UnixNano(), issued); err != nil {
				return err
			}
			tok, err = scanToken(tx.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE id = ?`, issued))
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE oauth_codes SET used_at = ? WHERE hash = ?`, now.UnixNano(), hashSecret(code)); err != nil {
			return err
		}
		if !now.Before(fromNanos(exp)) {
			outcome = errGrant()
			return nil
		}
		if json.Unmarshal([]byte(devs), &c.Spec.Devices) != nil || json.Unmarshal([]byte(tools), &c.Spec.Tools) != nil {
			return errcode.New(errcode.Internal, "authorization code record is corrupt")
		}
		c.Spec.TTL = time.Duration(ttl)
		if outcome = verify(&c); outcome != nil {
			return nil
		}
		if tok, err = s.connect(ctx, tx, &c, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE oauth_codes SET token_id = ? WHERE hash = ?`, tok.ID, hashSecret(code)); err != nil {
			return err
		}
		pair, err = issuePair(ctx, tx, tok, now)
		return err
	})
	return answerGrant(tok, pair, outcome, err)
}

// answerGrant is what a grant of a code or a refresh token answers: the
// connection and its new pair; on a replay, the connection it revoked
// with the error, for the audit; on any other refusal, the error alone.
func answerGrant(tok *Token, pair TokenPair, outcome, err error) (*Token, TokenPair, error) {
	switch {
	case err != nil:
		return nil, TokenPair{}, err
	case errors.Is(outcome, ErrCodeReused), errors.Is(outcome, ErrRefreshReused):
		return tok, TokenPair{}, outcome
	case outcome != nil:
		return nil, TokenPair{}, outcome
	}
	return tok, pair, nil
}

// connect makes the connection a code stands for: a token of kind
// TokenOAuth, which no bearer string of its own opens.
func (s *Store) connect(ctx context.Context, tx *txn, c *AuthCode, now time.Time) (*Token, error) {
	exp, err := expiry(now, c.Spec.TTL)
	if err != nil {
		return nil, err
	}
	devJSON, _ := json.Marshal(c.Spec.Devices)
	toolJSON, _ := json.Marshal(c.Spec.Tools)
	t := &Token{Name: connectionName(c.ClientName), Devices: c.Spec.Devices, Tools: c.Spec.Tools, Principal: c.Spec.Principal,
		CreatedAt: fromNanos(now.UnixNano()), ExpiresAt: fromNanos(exp.UnixNano()), Kind: TokenOAuth,
		Client: c.ClientName, ClientID: c.ClientID, Admin: c.Spec.Admin, Resource: c.Resource}
	for range 8 {
		t.ID = tokenIDPrefix + randomHex(tokenIDHexLen/2)
		res, err := tx.ExecContext(ctx, `INSERT INTO tokens(id, name, secret_hash, devices, tools, created_at, expires_at, principal, kind, client_id, client_name, resource, admin)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING`,
			t.ID, t.Name, randomBytes(32), string(devJSON), string(toolJSON), now.UnixNano(), exp.UnixNano(), t.Principal,
			TokenOAuth, t.ClientID, t.Client, t.Resource, t.Admin)
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return t, err
		}
	}
	return nil, errcode.New(errcode.Internal, "cannot allocate a token ID")
}

// connectionName is a token name made of the client's: the characters a
// token name may hold, the others as '-'.
func connectionName(client string) string {
	var b strings.Builder
	for _, r := range client {
		if b.Len() >= MaxNameBytes {
			break
		}
		if r < 0x80 && namechars.Valid(string(r), 1) {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	if b.Len() == 0 {
		return "oauth"
	}
	return b.String()
}

// issuePair adds an access and a refresh token to the connection.
func issuePair(ctx context.Context, tx *txn, t *Token, now time.Time) (TokenPair, error) {
	p := TokenPair{
		Access:          accessPrefix + t.ID + "_" + randomB64(),
		Refresh:         refreshPrefix + t.ID + "_" + randomB64(),
		AccessExpiresAt: fromNanos(min(now.Add(limits.OAuthAccessTTL).UnixNano(), t.ExpiresAt.UnixNano())),
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM oauth_tokens WHERE expires_at < ?`, now.UnixNano()); err != nil {
		return TokenPair{}, err
	}
	for _, row := range []struct {
		secret, kind string
		exp          int64
	}{{p.Access, accessKind, p.AccessExpiresAt.UnixNano()}, {p.Refresh, refreshKind, t.ExpiresAt.UnixNano()}} {
		if _, err := tx.ExecContext(ctx, `INSERT INTO oauth_tokens(hash, token_id, kind, expires_at) VALUES (?, ?, ?, ?)`,
			hashSecret(row.secret), t.ID, row.kind, row.exp); err != nil {
			return TokenPair{}, err
		}
	}
	return p, nil
}

// parseOAuthBearer returns the token ID an access or refresh token with
// this prefix names, or "" when it is malformed.
func parseOAuthBearer(s, prefix string) string {
	if len(s) != oauthBearerLen || !strings.HasPrefix(s, prefix) {
		return ""
	}
	id := s[len(prefix) : len(prefix)+tokenIDLen]
	rest := s[len(prefix)+tokenIDLen:]
	if !validTokenID(id) || rest[0] != '_' || !validB64Secret(rest[1:]) {
		return ""
	}
	return id
}

// authAccess is AuthToken for an access token.
func (s *Store) authAccess(bearer string, now time.Time) (*Token, error) {
	id := parseOAuthBearer(bearer, accessPrefix)
	if id == "" {
		return nil, errClientToken()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var exp int64
	t, err := scanToken(s.db.QueryRowContext(ctx, `SELECT `+tokenColumns+`, o.expires_at FROM oauth_tokens o JOIN tokens ON tokens.id = o.token_id
		WHERE o.hash = ? AND o.kind = ? AND tokens.id = ?`, hashSecret(bearer), accessKind, id), &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errClientToken()
	}
	if err != nil {
		return nil, dbErr(err)
	}
	if e := fromNanos(exp); e.Before(t.ExpiresAt) {
		t.ExpiresAt = e
	}
	if t.Kind != TokenOAuth || t.RevokedAt != nil || !now.Before(t.ExpiresAt) {
		return nil, errClientToken()
	}
	return t, nil
}

// RefreshConnection spends a refresh token of clientID's and returns a
// new pair for its connection. A spent one is accepted once more within
// limits.OAuthRefreshGrace of its rotation (the pair its first use made
// stays good too); presented again after that, or a third time, it is
// ErrRefreshReused, and revokes the connection.
func (s *Store) RefreshConnection(refresh, clientID string, now time.Time) (*Token, TokenPair, error) {
	if err := checkNow(now); err != nil {
		return nil, TokenPair{}, err
	}
	id := parseOAuthBearer(refresh, refreshPrefix)
	if id == "" {
		return nil, TokenPair{}, errGrant()
	}
	var (
		tok     *Token
		pair    TokenPair
		outcome error
	)
	err := s.inTx(func(ctx context.Context, tx *txn) error {
		tok, pair, outcome = nil, TokenPair{}, nil
		var spent, regranted sql.NullInt64
		t, err := scanToken(tx.QueryRowContext(ctx, `SELECT `+tokenColumns+`, o.spent_at, o.regranted_at FROM oauth_tokens o JOIN tokens ON tokens.id = o.token_id
			WHERE o.hash = ? AND o.kind = ? AND tokens.id = ?`, hashSecret(refresh), refreshKind, id), &spent, &regranted)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			outcome = errGrant()
			return nil
		case err != nil:
			return err
		case t.ClientID != clientID || t.RevokedAt != nil || !now.Before(t.ExpiresAt):
			outcome = errGrant()
			return nil
		case spent.Valid && !regranted.Valid && now.Before(time.Unix(0, spent.Int64).Add(limits.OAuthRefreshGrace)):
			if _, err := tx.ExecContext(ctx, `UPDATE oauth_tokens SET regranted_at = ? WHERE hash = ?`, now.UnixNano(), hashSecret(refresh)); err != nil {
				return err
			}
		case spent.Valid:
			outcome, tok = ErrRefreshReused, t
			_, err = tx.ExecContext(ctx, `UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`, now.UnixNano(), t.ID)
			return err
		default:
			if _, err := tx.ExecContext(ctx, `UPDATE oauth_tokens SET spent_at = ? WHERE hash = ?`, now.UnixNano(), hashSecret(refresh)); err != nil {
				return err
			}
		}
		tok = t
		pair, err = issuePair(ctx, tx, t, now)
		return err
	})
	return answerGrant(tok, pair, outcome, err)
}

// RevokeOAuthToken revokes the connection of an access or refresh token
// (RFC 7009: both of its tokens end) and returns the connection's token
// (its principal for the audit); nil for a token that is none.
func (s *Store) RevokeOAuthToken(token string, now time.Time) (*Token, error) {
	if err := checkNow(now); err != nil {
		return nil, err
	}
	id := parseOAuthBearer(token, accessPrefix)
	if id == "" {
		id = parseOAuthBearer(token, refreshPrefix)
	}
	if id == "" {
		return nil, nil
	}
	var revoked *Token
	err := s.inTx(func(ctx context.Context, tx *txn) error {
		revoked = nil
		t, err := scanToken(tx.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM oauth_tokens o JOIN tokens ON tokens.id = o.token_id
			WHERE o.hash = ? AND tokens.id = ?`, hashSecret(token), id))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		revoked = t
		_, err = tx.ExecContext(ctx, `UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`, now.UnixNano(), id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return revoked, nil
}
