// Package enrollment keeps the credential an agent obtains from a server
// at enrollment (`commandcore enroll`): the server, the device's ID and
// name, the bearer token the link authenticates with, the secret its
// heartbeat replies are MACed with, and the key grants are verified with.
// It lives in <config-dir>/identity.json, owner-only, and is read strictly.
package enrollment

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/ownerfile"
	"github.com/commandcore/commandcore/internal/strictjson"
)

// File is the credential's name inside the config directory.
const File = "identity.json"

// Schema is the credential file's schema version.
const Schema = 1

// maxBytes bounds the credential file.
const maxBytes = 16 << 10

// ErrNotEnrolled says no credential is stored.
var ErrNotEnrolled = errors.New("not enrolled: run COMMANDCORE_ENROLL_CODE=CODE commandcore enroll --server URL")

// Credential is what enrollment stores.
type Credential struct {
	Schema int    `json:"schema_version"`
	Server string `json:"server"`
	// Servers, when the server runs as several replicas, are all their
	// URLs, Server first; the agent links to any of them.
	Servers  []string `json:"servers,omitempty"`
	DeviceID string   `json:"device_id"`
	Name     string   `json:"name"`
	Token    string   `json:"token"`
	// PreviousToken is the token the last link used, kept until the server
	// has surely retired it (see SaveToken).
	PreviousToken string    `json:"previous_token,omitempty"`
	Secret        []byte    `json:"secret"`
	GrantKey      string    `json:"grant_key"`
	EnrolledAt    time.Time `json:"enrolled_at"`
}

// ServerList is every URL of the server, Server first.
func (id *Credential) ServerList() []string {
	if len(id.Servers) > 0 {
		return id.Servers
	}
	return []string{id.Server}
}

// PublicKey returns the key the server signs grants with.
func (id *Credential) PublicKey() (ed25519.PublicKey, error) {
	return authz.DecodeGrantKey(id.GrantKey)
}

// Path returns the credential file's path in configDir.
func Path(configDir string) string { return filepath.Join(configDir, File) }

// Load reads the credential from configDir: ErrNotEnrolled when there is
// none; an error naming what is wrong (never the content) when the file
// is not the owner's alone or is malformed.
func Load(configDir string) (*Credential, error) {
	// The token and secret are credentials: anyone who can read them can
	// impersonate the device.
	data, err := ownerfile.Read(Path(configDir), maxBytes, ownerfile.Private)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotEnrolled
	}
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return Decode(data)
}

// Decode parses a credential strictly: unknown fields, trailing data, a
// wrong schema version or a missing field are errors.
func Decode(data []byte) (*Credential, error) {
	var id Credential
	switch err := strictjson.Decode(data, &id, maxBytes); {
	case errors.Is(err, strictjson.ErrTooLarge):
		return nil, errors.New("identity: file too large")
	case errors.Is(err, strictjson.ErrTrailing):
		return nil, errors.New("identity: trailing data")
	case err != nil:
		return nil, errors.New("identity: malformed JSON")
	}
	if id.Schema != Schema {
		return nil, fmt.Errorf("identity: unsupported schema_version %d", id.Schema)
	}
	if id.Server == "" || id.DeviceID == "" || id.Token == "" || len(id.Secret) < 16 {
		return nil, errors.New("identity: incomplete")
	}
	if len(id.Servers) > 0 && (id.Servers[0] != id.Server || len(id.Servers) > limits.MaxServers) {
		return nil, errors.New("identity: servers do not start with its server")
	}
	if _, err := id.PublicKey(); err != nil {
		return nil, errors.New("identity: invalid grant key")
	}
	return &id, nil
}

// Remove deletes the credential from configDir, and configDir itself when
// nothing else is left in it; a device without one is not an error. The
// server still knows the device until it is revoked there.
func Remove(configDir string) error {
	if err := os.Remove(Path(configDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove identity: %w", err)
	}
	// Only an empty directory goes; the owner's other files stay.
	_ = os.Remove(configDir)
	return nil
}

// Save writes id to configDir atomically and owner-only, creating the
// directory when needed.
func Save(configDir string, id *Credential) error {
	if err := os.MkdirAll(configDir, 0o700); err != nil {
		return fmt.Errorf("create config dir: %w", err)
	}
	data, err := json.Marshal(id)
	if err != nil {
		return fmt.Errorf("encode identity: %w", err)
	}
	if err := atomicfile.Write(Path(configDir), data, 0o600); err != nil {
		return fmt.Errorf("save identity: %w", err)
	}
	return nil
}
