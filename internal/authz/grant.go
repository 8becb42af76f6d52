// Grants: the per-call grants (README, "The relay and the link"), minted by the relay and verified
// by the agent. Every tool call from the relay carries a short-lived token,
// signed by the relay, naming the device, the tool and the principal, and,
// for an agent that checks it, the digest of the call's arguments. The
// agent verifies it on every operation, so a stolen or replayed grant is
// only good for that one call on one device for about a minute.
//
// A token is base64url(canonical JSON claims) "." base64url(ed25519
// signature over the first part's bytes), both without padding. Ed25519 was
// chosen because its signatures are deterministic and non-malleable, and the
// agent only ever needs the relay's public key.

package authz

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/strictjson"
)

// GrantMetaKey is the key under which a grant travels in a tools/call
// request's _meta object.
const GrantMetaKey = "commandcore/grant"

// idBytes is the size of a grant's random ID before hex encoding.
const idBytes = 16

// BindsCallsCapability is the experimental MCP capability an agent's
// server announces when it checks a grant's call digest: the relay binds
// grants to their call only for such agents, since an earlier agent's
// strict decoder refuses a claim it does not know.
const BindsCallsCapability = "commandcore/grant-call-digest"

// Grant is what a grant asserts. Times are unix seconds.
type Grant struct {
	Device    string `json:"dev"`
	Tool      string `json:"tool"`
	Principal string `json:"sub"`
	IssuedAt  int64  `json:"iat"`
	Expires   int64  `json:"exp"`
	ID        string `json:"jti"`
	// Call is CallDigest of the call the grant authorizes; empty in a
	// grant for an agent that does not check it.
	Call string `json:"call,omitempty"`
	// Minter and Seq number the grant (Minter): the relay process's ID and
	// its count; both empty in a grant for an agent that does not take
	// numbered grants.
	Minter string `json:"mint,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
}

// CallDigest is the digest a grant binds: SHA-256 over the tool's name
// and the call's arguments exactly as the device receives them (nil and
// empty arguments alike), the name length-prefixed so that no two calls
// share an input.
func CallDigest(tool string, args []byte) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(tool)))
	h.Write(n[:])
	h.Write([]byte(tool))
	h.Write(args)
	return hex.EncodeToString(h.Sum(nil))
}

// b64 is the token's encoding. Decoding goes through decodePart, so that
// each token has exactly one spelling.
var b64 = base64.RawURLEncoding.Strict()

// decodePart decodes one part of a token and insists that it was the
// canonical spelling: even a strict decoder skips '\r' and '\n', and a
// variant spelling of a valid token must not verify.
func decodePart(s string) ([]byte, error) {
	b, err := b64.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("decode grant part: %w", err)
	}
	if b64.EncodeToString(b) != s {
		return nil, errors.New("grant part is not canonical base64url")
	}
	return b, nil
}

// NewGrantKey returns a fresh signing key for a relay.
func NewGrantKey() (ed25519.PrivateKey, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate grant key: %w", err)
	}
	return key, nil
}

// MintGrant returns a grant for one call of tool on device by principal,
// valid from now for limits.GrantTTL, bound to call (CallDigest of the
// call; "" for an agent that does not check it).
func MintGrant(key ed25519.PrivateKey, device, tool, principal, call string, now time.Time) (string, error) {
	return mint(key, Grant{Device: device, Tool: tool, Principal: principal, Call: call}, now)
}

// MintNumbered is MintGrant with the grant numbered by m, for an agent
// that takes numbered grants (GrantSequenceCapability).
func MintNumbered(key ed25519.PrivateKey, m *Minter, device, tool, principal, call string, now time.Time) (string, error) {
	c := Grant{Device: device, Tool: tool, Principal: principal, Call: call}
	c.Minter, c.Seq = m.next()
	return mint(key, c, now)
}

// mint fills in c's times and ID and signs it.
func mint(key ed25519.PrivateKey, c Grant, now time.Time) (string, error) {
	if len(key) != ed25519.PrivateKeySize {
		return "", errcode.New(errcode.InvalidArgument, "grant signing key is malformed")
	}
	if c.Device == "" || c.Tool == "" || c.Principal == "" {
		return "", errcode.New(errcode.InvalidArgument, "a grant needs a device, a tool and a principal")
	}
	var id [idBytes]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", fmt.Errorf("grant id: %w", err)
	}
	c.IssuedAt, c.Expires, c.ID = now.Unix(), now.Add(limits.GrantTTL).Unix(), hex.EncodeToString(id[:])
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encode grant claims: %w", err)
	}
	head := b64.EncodeToString(payload)
	token := head + "." + b64.EncodeToString(ed25519.Sign(key, []byte(head)))
	if len(token) > limits.MaxGrantBytes {
		return "", errcode.New(errcode.InvalidArgument, "the grant would exceed %d bytes", limits.MaxGrantBytes)
	}
	return token, nil
}

// VerifyGrant checks token against the relay's public key and returns its
// claims if it is for device and tool, bound to a call whose arguments are
// args (when it names one), and valid at now (with limits.GrantClockSkew
// of slack either way). A grant naming no call comes from a relay that
// does not bind them; a relay that does cannot be made to leave the
// digest out, since the claims are signed. The signature is checked
// before the claims are parsed, so unauthenticated JSON is never decoded.
// Each failure is a grant_invalid error that names the failed check and
// nothing else.
func VerifyGrant(pub ed25519.PublicKey, token, device, tool string, args []byte, now time.Time) (*Grant, error) {
	if token == "" {
		return nil, invalidGrant("grant is missing")
	}
	if len(pub) != ed25519.PublicKeySize {
		return nil, invalidGrant("grant cannot be checked: no valid verification key")
	}
	if len(token) > limits.MaxGrantBytes {
		return nil, invalidGrant("grant is malformed")
	}
	head, sigText, ok := strings.Cut(token, ".")
	if !ok {
		return nil, invalidGrant("grant is malformed")
	}
	payload, err := decodePart(head)
	if err != nil {
		return nil, invalidGrant("grant is malformed")
	}
	sig, err := decodePart(sigText)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, invalidGrant("grant is malformed")
	}
	if !ed25519.Verify(pub, []byte(head), sig) {
		return nil, invalidGrant("grant signature is invalid")
	}
	c, err := decodeGrant(payload)
	if err != nil {
		return nil, invalidGrant("grant is malformed")
	}
	if c.Device != device {
		return nil, invalidGrant("grant is for another device")
	}
	if c.Tool != tool {
		return nil, invalidGrant("grant is for another tool")
	}
	if c.Call != "" && c.Call != CallDigest(tool, args) {
		return nil, invalidGrant("grant is for another call (its arguments differ)")
	}
	// A relay may not mint long grants: the agent enforces the lifetime
	// itself rather than trusting whatever the relay signed.
	if c.Expires-c.IssuedAt > int64(limits.GrantTTL/time.Second) {
		return nil, invalidGrant("grant lifetime is too long")
	}
	skew := int64(limits.GrantClockSkew / time.Second)
	// Written as now±skew so that no claim value can overflow the sum.
	if now.Unix()-skew > c.Expires {
		return nil, invalidGrant("grant has expired (if calls keep failing so, compare the device's clock with the relay's)")
	}
	if now.Unix()+skew < c.IssuedAt {
		return nil, invalidGrant("grant is not yet valid (compare the device's clock with the relay's)")
	}
	return c, nil
}

// decodeGrant parses the signed payload strictly: every field present, and
// the bytes exactly the canonical encoding MintGrant produces. The decoder
// refuses unknown fields and trailing data; the canonical comparison also
// rejects whitespace, null values, duplicate keys and case-folded field
// names, which encoding/json would otherwise accept.
func decodeGrant(payload []byte) (*Grant, error) {
	var c Grant
	if err := strictjson.Decode(payload, &c, limits.MaxGrantBytes); err != nil {
		return nil, fmt.Errorf("decode claims: %w", err)
	}
	canonical, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("re-encode claims: %w", err)
	}
	if !bytes.Equal(canonical, payload) {
		return nil, errors.New("claims are not canonical")
	}
	if c.Device == "" || c.Tool == "" || c.Principal == "" {
		return nil, errors.New("claims lack a device, tool or principal")
	}
	if c.IssuedAt <= 0 || c.Expires <= c.IssuedAt {
		return nil, errors.New("claims have an impossible lifetime")
	}
	if id, err := hex.DecodeString(c.ID); err != nil || len(id) != idBytes || hex.EncodeToString(id) != c.ID {
		return nil, errors.New("claims have a malformed id")
	}
	if d, err := hex.DecodeString(c.Call); err != nil || (c.Call != "" && len(d) != sha256.Size) || hex.EncodeToString(d) != c.Call {
		return nil, errors.New("claims have a malformed call digest")
	}
	if m, err := hex.DecodeString(c.Minter); err != nil || (c.Minter != "" && len(m) != minterBytes) || hex.EncodeToString(m) != c.Minter || (c.Minter == "") != (c.Seq == 0) {
		return nil, errors.New("claims have a malformed number")
	}
	return &c, nil
}

func invalidGrant(msg string) error {
	return errcode.New(errcode.GrantInvalid, "%s", msg)
}

// GrantFromMeta returns the grant carried in a request's _meta, or "" if
// there is none or it is not a string.
func GrantFromMeta(meta map[string]any) string {
	s, _ := meta[GrantMetaKey].(string)
	return s
}

// EncodeGrantKey renders a relay's public key for the device's enrollment
// credential.
func EncodeGrantKey(pub ed25519.PublicKey) string {
	return base64.StdEncoding.EncodeToString(pub)
}

// DecodeGrantKey parses what EncodeGrantKey produced.
func DecodeGrantKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, errcode.New(errcode.InvalidArgument, "grant public key is malformed")
	}
	return ed25519.PublicKey(b), nil
}
