package signin

import (
	"crypto/sha256"
	"encoding/json"
	"errors"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/commandcore/commandcore/internal/errcode"
)

const (
	// stateKindPasskeyAdd and stateKindPasskey name a passkey being
	// registered and a passkey sign-in under way.
	stateKindPasskeyAdd = "passkey-add"
	stateKindPasskey    = "passkey"
)

// ErrNoPasskeys refuses a passkey ceremony on a panel whose address can
// hold none (an IP address).
var ErrNoPasskeys = errors.New("this panel's address cannot hold passkeys; reach it by a host name")

// admin is an admin as WebAuthn sees them.
type admin struct {
	name  string
	creds []webauthn.Credential
}

// userHandle is the WebAuthn user handle of an admin: a digest of their
// name, so it names no one to whoever reads an authenticator.
func userHandle(name string) []byte {
	h := sha256.Sum256([]byte("commandcore panel admin\x00" + name))
	return h[:]
}

func (a *admin) WebAuthnID() []byte                         { return userHandle(a.name) }
func (a *admin) WebAuthnName() string                       { return a.name }
func (a *admin) WebAuthnDisplayName() string                { return a.name }
func (a *admin) WebAuthnCredentials() []webauthn.Credential { return a.creds }

// loadAdmin reads an admin's passkeys as WebAuthn credentials.
func (s *SignIn) loadAdmin(name string) (*admin, error) {
	keys, err := s.cfg.State.Passkeys(name)
	if err != nil {
		return nil, err
	}
	a := &admin{name: name}
	for _, k := range keys {
		var c webauthn.Credential
		if err := json.Unmarshal(k.Credential, &c); err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "a stored passkey is corrupt")
		}
		a.creds = append(a.creds, c)
	}
	return a, nil
}

// passkeyState is what a passkey ceremony keeps while the browser asks
// its authenticator.
type passkeyState struct {
	Admin   string               `json:"admin,omitempty"`
	Session webauthn.SessionData `json:"session"`
}

func (s *SignIn) putPasskeyState(kind string, st passkeyState) (string, error) {
	data, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	return s.cfg.State.PutSignInState(kind, data, s.now())
}

func (s *SignIn) takePasskeyState(kind, cookie string) (passkeyState, error) {
	var st passkeyState
	data, err := s.cfg.State.TakeSignInState(cookie, kind, s.now())
	if err != nil {
		return st, refused("no passkey ceremony under way", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, refused("passkey state", err)
	}
	return st, nil
}

// BeginAddPasskey starts registering a passkey for the signed-in admin
// name: it returns the options for navigator.credentials.create (the
// publicKey member, as JSON) and the secret naming the ceremony.
func (s *SignIn) BeginAddPasskey(name string) (options []byte, cookie string, err error) {
	if !s.Passkeys() {
		return nil, "", ErrNoPasskeys
	}
	a, err := s.loadAdmin(name)
	if err != nil {
		return nil, "", err
	}
	exclude := make([]protocol.CredentialDescriptor, len(a.creds))
	for i, c := range a.creds {
		exclude[i] = c.Descriptor()
	}
	creation, session, err := s.webauthn.BeginRegistration(a, webauthn.WithExclusions(exclude),
		webauthn.WithResidentKeyRequirement(protocol.ResidentKeyRequirementRequired))
	if err != nil {
		return nil, "", err
	}
	if cookie, err = s.putPasskeyState(stateKindPasskeyAdd, passkeyState{Admin: name, Session: *session}); err != nil {
		return nil, "", err
	}
	options, err = json.Marshal(creation.Response)
	return options, cookie, err
}

// FinishAddPasskey registers the credential the browser created (its
// JSON, from PublicKeyCredential.toJSON) as name's passkey, if it answers
// the ceremony cookie names, begun by the same admin, with the user
// verified.
func (s *SignIn) FinishAddPasskey(name, cookie string, credential []byte) error {
	if !s.Passkeys() {
		return ErrNoPasskeys
	}
	st, err := s.takePasskeyState(stateKindPasskeyAdd, cookie)
	if err != nil {
		return err
	}
	if st.Admin != name {
		return refused("another admin's ceremony", nil)
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes(credential)
	if err != nil {
		return refused("credential", err)
	}
	a, err := s.loadAdmin(name)
	if err != nil {
		return err
	}
	c, err := s.webauthn.CreateCredential(a, st.Session, parsed)
	if err != nil {
		return refused("registration", err)
	}
	if !c.Flags.UserVerified {
		return refused("user not verified", nil)
	}
	rec, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return s.cfg.State.AddPasskey(name, c.ID, rec, s.now())
}

// BeginPasskey starts a passkey sign-in: the options for
// navigator.credentials.get (the publicKey member, as JSON) and the
// secret naming the ceremony. No credential is listed: the passkey the
// person picks names its admin.
func (s *SignIn) BeginPasskey() (options []byte, cookie string, err error) {
	if !s.Passkeys() {
		return nil, "", ErrNoPasskeys
	}
	assertion, session, err := s.webauthn.BeginDiscoverableLogin(webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		return nil, "", err
	}
	if cookie, err = s.putPasskeyState(stateKindPasskey, passkeyState{Session: *session}); err != nil {
		return nil, "", err
	}
	options, err = json.Marshal(assertion.Response)
	return options, cookie, err
}

// FinishPasskey signs in with the assertion the browser made (its JSON):
// the passkey must be registered to an admin who stands, its user handle
// theirs, its signature valid over the ceremony's challenge, the user
// verified and its counter not gone back. It returns the admin and their
// new session; every refusal is ErrRefused.
func (s *SignIn) FinishPasskey(cookie string, assertion []byte) (name, session string, err error) {
	if !s.Passkeys() {
		return "", "", ErrNoPasskeys
	}
	st, err := s.takePasskeyState(stateKindPasskey, cookie)
	if err != nil {
		return "", "", err
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(assertion)
	if err != nil {
		return "", "", refused("assertion", err)
	}
	find := func(rawID, handle []byte) (webauthn.User, error) {
		k, err := s.cfg.State.FindPasskey(rawID)
		if err != nil {
			return nil, err
		}
		if string(handle) != string(userHandle(k.Admin)) {
			return nil, errors.New("user handle is not the passkey's admin's")
		}
		return s.loadAdmin(k.Admin)
	}
	user, c, err := s.webauthn.ValidatePasskeyLogin(find, st.Session, parsed)
	if err != nil {
		return "", "", refused("passkey", err)
	}
	if !c.Flags.UserVerified || c.Authenticator.CloneWarning {
		return "", "", refused("user not verified, or a cloned authenticator", nil)
	}
	rec, err := json.Marshal(c)
	if err != nil {
		return "", "", err
	}
	name, session, err = s.cfg.State.PasskeySignIn(c.ID, rec, s.now())
	if err != nil {
		return "", "", refused("session", err)
	}
	if name != user.WebAuthnName() {
		s.cfg.State.EndSession(session)
		return "", "", refused("passkey changed hands", nil)
	}
	return name, session, nil
}
