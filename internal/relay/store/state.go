package store

import (
	"crypto/ed25519"
	"time"
)

// State is the relay's persistent state as the relay server and its
// administration commands use it: devices and their credentials, client
// tokens, the audit log and the grant key. *Store, over SQLite, is the
// embedded implementation; docs/scaling.md describes the shared one a
// fleet of relay replicas would use instead. Every implementation keeps
// the contracts the methods of *Store document: errors are *errcode.Error
// values with content-free messages, secrets are kept only as hashes
// (except device heartbeat secrets), an enrollment code is consumed
// exactly once, a rotation commits only while its old token is current,
// and a revocation by any process takes effect on the next operation
// (nothing but the grant key is cached; a caller that remembers a token's
// check relies on it only while TokenChanges reads what it read before
// the check).
type State interface {
	// GrantKey returns the key the relay signs grants with; it never
	// changes once created.
	GrantKey() (ed25519.PrivateKey, error)
	// ClusterKey returns the key the replicas seal their messages with;
	// it never changes once created.
	ClusterKey() ([]byte, error)
	// SetPublicURL records the URL devices and clients reach the relay
	// by ("" clears it); PublicURL returns it, "" when none is recorded.
	SetPublicURL(u string) error
	PublicURL() (string, error)

	// Enrollment and devices.
	CreateEnrollCode(name string, ttl time.Duration, now time.Time) (string, error)
	Enroll(code, proposedName string, now time.Time) (dev *Device, token string, secret []byte, err error)
	AuthDevice(token string, now time.Time) (*Device, []byte, error)
	RotateDeviceToken(id, current, next string, now time.Time) error
	RevokeDevice(idOrName string, now time.Time) (*Device, bool, error)
	LeaveDevice(id string, now time.Time) (*Device, bool, error)
	FindDevice(idOrName string) (*Device, error)
	Devices() ([]Device, error)
	SetSeen(ids []string, at time.Time) error
	Standings() ([]Standing, error)
	StandingChanges() (int64, error)

	// Replicas and the device links each holds.
	JoinReplica(r Replica, now time.Time) error
	ReplicaSeen(id string, now time.Time) error
	LeaveReplica(id string) error
	Replicas(now time.Time) ([]Replica, error)
	LinkHolder(device string, now time.Time) (string, error)
	TakeLink(device, replica, from string, now time.Time) (bool, error)
	ReleaseLink(device, replica string, now time.Time) error

	// Client tokens.
	CreateToken(spec TokenSpec, now time.Time) (*Token, string, error)
	AuthToken(bearer string, now time.Time) (*Token, error)
	Tokens() ([]Token, error)
	RevokeToken(id string, now time.Time) error
	TokenChanges() (int64, error)

	// OAuth: dynamic registrations, authorization requests waiting for
	// consent, codes, and the connections' access and refresh tokens.
	RegisterClient(c OAuthClient, now time.Time) (*OAuthClient, error)
	RegisteredClient(id string, now time.Time) (*OAuthClient, error)
	CreateAuthRequest(r AuthRequest, now time.Time) (string, error)
	AuthRequest(id string, now time.Time) (*AuthRequest, error)
	ApproveAuthRequest(id string, spec ConnectionSpec, now time.Time) (string, *AuthRequest, error)
	DenyAuthRequest(id string, now time.Time) (*AuthRequest, error)
	RedeemAuthCode(code string, verify func(*AuthCode) error, now time.Time) (*Token, TokenPair, error)
	RefreshConnection(refresh, clientID string, now time.Time) (*Token, TokenPair, error)
	RevokeOAuthToken(token string, now time.Time) (*Token, error)

	// The audit log of client calls, and apart from it the counts of
	// requests refused without a valid client token.
	AppendAudit(entries []AuditEntry, now time.Time) error
	Audit(n int) ([]AuditEntry, error)
	AddRefusalCounts(counts []RefusalCount, now time.Time) error
	RefusalCounts(n int) ([]RefusalCount, error)
	AuditPage(f AuditFilter, n int) ([]AuditEntry, error)
	AuditCounts(since time.Time) (calls, failed int64, err error)

	// The panel: its admins, their sign-in codes and sessions, and what a
	// device's link reported.
	CreateSignIn(admin string, ttl time.Duration, now time.Time) (string, error)
	SignIn(code string, now time.Time) (admin, session string, err error)
	AuthSession(session string, now time.Time) (*PanelSession, error)
	SessionLive(session string, now time.Time) error
	EndSession(session string) error
	Admins(now time.Time) ([]Admin, error)
	RevokeAdmin(name string, now time.Time) error
	NoteAgent(device, replica string, note AgentNote) error

	// The panel's other ways in: the team's identity provider, passkeys,
	// and the state of a sign-in under way.
	SSOSignIn(admin string, now time.Time) (session string, err error)
	AddPasskey(admin string, id, credential []byte, now time.Time) error
	Passkeys(admin string) ([]Passkey, error)
	FindPasskey(id []byte) (*Passkey, error)
	HasPasskeys() (bool, error)
	RemovePasskey(admin string, id []byte) error
	PasskeySignIn(id, credential []byte, now time.Time) (admin, session string, err error)
	PutSignInState(kind string, data []byte, now time.Time) (string, error)
	TakeSignInState(id, kind string, now time.Time) ([]byte, error)

	// Secret prompts: process.input's secret_prompt, waiting for a person.
	CreateSecretPrompt(p SecretPrompt, now time.Time) (string, error)
	SecretPrompt(id string, now time.Time) (*SecretPrompt, error)
	TakeSecretPrompt(id string, now time.Time) (*SecretPrompt, error)
	FinishSecretPrompt(id string, failed bool, result []byte, now time.Time) error
	DeclineSecretPrompt(id string, now time.Time) error

	Close() error
}

var _ State = (*Store)(nil)
