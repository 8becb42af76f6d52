package store

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"math"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/namechars"
	"github.com/commandcore/commandcore/internal/uuidtext"
)

// MaxNameBytes bounds a device or token name.
const MaxNameBytes = 64

// randomBytes returns n bytes from crypto/rand (which never fails: the
// runtime aborts the process if the system's generator does).
func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// hashSecret is the form a secret is stored in.
func hashSecret(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// sameHash compares two stored hashes in constant time.
func sameHash(a, b []byte) bool {
	return len(a) == sha256.Size && subtle.ConstantTimeCompare(a, b) == 1
}

// b64 is the encoding of random token parts: 32 bytes give 43 characters.
var b64 = base64.RawURLEncoding

// randomB64 returns 32 random bytes, base64url without padding (43 chars).
func randomB64() string { return b64.EncodeToString(randomBytes(32)) }

// validB64Secret reports whether s is 43 base64url characters decoding to
// 32 bytes (the canonical encoding only).
func validB64Secret(s string) bool {
	if len(s) != 43 {
		return false
	}
	b, err := b64.Strict().DecodeString(s)
	return err == nil && len(b) == 32
}

func randomHex(nBytes int) string { return hex.EncodeToString(randomBytes(nBytes)) }

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidName reports whether s is a valid device or token name: 1 to 64
// bytes of [A-Za-z0-9._-], and not "." or ".." (a name appears as a URL
// path segment, /mcp/<device>).
func ValidName(s string) bool {
	return namechars.Valid(s, MaxNameBytes) && s != "." && s != ".."
}

// ValidDeviceName reports whether s may name a device: a valid name that
// is not shaped like a device ID, so that a name or ID given to the relay
// (/mcp/<device>, a token's device scope) means one device only.
func ValidDeviceName(s string) bool { return ValidName(s) && !IsDeviceID(s) }

// IsDeviceID reports whether s is shaped like a device ID: a UUID in its
// canonical 8-4-4-4-12 hexadecimal form, in any letter case.
func IsDeviceID(s string) bool { return uuidtext.AnyCase(s) }

// Times are stored as unix nanoseconds; these bound what can be stored.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

func storable(t time.Time) bool { return !t.Before(minTime) && !t.After(maxTime) }

// expiry returns now+ttl, refusing a non-positive ttl and a time that
// cannot be stored.
func expiry(now time.Time, ttl time.Duration) (time.Time, error) {
	if ttl <= 0 {
		return time.Time{}, errcode.New(errcode.InvalidArgument, "lifetime must be positive")
	}
	exp := now.Add(ttl)
	if !storable(now) || !storable(exp) || !exp.After(now) {
		return time.Time{}, errcode.New(errcode.InvalidArgument, "lifetime is out of range")
	}
	return exp, nil
}

func checkNow(now time.Time) error {
	if !storable(now) {
		return errcode.New(errcode.InvalidArgument, "time is out of range")
	}
	return nil
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }
