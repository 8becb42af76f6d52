package authz

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

const (
	dev  = "laptop-1"
	tool = "process.start"
	who  = "client-7"
)

var t0 = time.Unix(1_800_000_000, 0)

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	k, err := NewGrantKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// signRaw builds a correctly signed token around arbitrary payload bytes,
// so the checks after the signature can be exercised one by one.
func signRaw(k ed25519.PrivateKey, payload string) string {
	head := base64.RawURLEncoding.EncodeToString([]byte(payload))
	return head + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(k, []byte(head)))
}

func grantJSON(t testing.TB, c Grant) string {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func validGrant() Grant {
	return Grant{Device: dev, Tool: tool, Principal: who, IssuedAt: t0.Unix(), Expires: t0.Unix() + 60, ID: strings.Repeat("ab", 16)}
}

func wantReject(t *testing.T, name string, k ed25519.PrivateKey, token string, now time.Time, msg string) {
	t.Helper()
	c, err := VerifyGrant(pub(k), token, dev, tool, nil, now)
	if err == nil {
		t.Errorf("%s: verified %+v, want %q", name, c, msg)
		return
	}
	if c != nil {
		t.Errorf("%s: claims returned with an error", name)
	}
	if !errcode.Is(err, errcode.GrantInvalid) {
		t.Errorf("%s: %v, want code grant_invalid", name, err)
	}
	if got := errcode.From(err).Message; got != msg {
		t.Errorf("%s: message %q, want %q", name, got, msg)
	}
}

func TestRoundTrip(t *testing.T) {
	k := newKey(t)
	tok, err := MintGrant(k, dev, tool, who, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := VerifyGrant(pub(k), tok, dev, tool, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Device != dev || c.Tool != tool || c.Principal != who {
		t.Fatalf("claims %+v", c)
	}
	if c.IssuedAt != t0.Unix() || c.Expires != t0.Add(limits.GrantTTL).Unix() {
		t.Fatalf("times %d..%d", c.IssuedAt, c.Expires)
	}
	if len(c.ID) != 32 || strings.Trim(c.ID, "0123456789abcdef") != "" {
		t.Fatalf("id %q is not 16 bytes of hex", c.ID)
	}
	tok2, err := MintGrant(k, dev, tool, who, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	if tok2 == tok {
		t.Fatal("two grants share an id")
	}
}

func TestClockBoundaries(t *testing.T) {
	k := newKey(t)
	tok, err := MintGrant(k, dev, tool, who, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	skew := limits.GrantClockSkew
	for _, now := range []time.Time{t0.Add(-skew), t0.Add(limits.GrantTTL + skew)} {
		if _, err := VerifyGrant(pub(k), tok, dev, tool, nil, now); err != nil {
			t.Errorf("at %v: %v", now.Sub(t0), err)
		}
	}
	wantReject(t, "expired", k, tok, t0.Add(limits.GrantTTL+skew+time.Second), "grant has expired (if calls keep failing so, compare the device's clock with the relay's)")
	wantReject(t, "long expired", k, tok, t0.Add(24*time.Hour), "grant has expired (if calls keep failing so, compare the device's clock with the relay's)")
	wantReject(t, "early", k, tok, t0.Add(-skew-time.Second), "grant is not yet valid (compare the device's clock with the relay's)")
}

func TestMismatch(t *testing.T) {
	k := newKey(t)
	tok, err := MintGrant(k, "other-box", tool, who, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	wantReject(t, "device", k, tok, t0, "grant is for another device")
	tok, err = MintGrant(k, dev, "process.run", who, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	wantReject(t, "tool", k, tok, t0, "grant is for another tool")
}

func TestMissing(t *testing.T) {
	k := newKey(t)
	wantReject(t, "empty", k, "", t0, "grant is missing")
}

func TestSignature(t *testing.T) {
	k := newKey(t)
	tok, err := MintGrant(newKey(t), dev, tool, who, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	wantReject(t, "other key", k, tok, t0, "grant signature is invalid")
	_, sig, _ := strings.Cut(tok, ".")
	wantReject(t, "empty claims", k, "."+sig, t0, "grant signature is invalid")

	// Same signature, different (well-formed) claims.
	tok, err = MintGrant(k, dev, tool, who, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	_, sig, _ = strings.Cut(tok, ".")
	forged := base64.RawURLEncoding.EncodeToString([]byte(grantJSON(t, validGrant()))) + "." + sig
	wantReject(t, "swapped claims", k, forged, t0, "grant signature is invalid")
}

func TestLifetimeTooLong(t *testing.T) {
	k := newKey(t)
	c := validGrant()
	c.Expires = c.IssuedAt + int64(limits.GrantTTL/time.Second)
	if _, err := VerifyGrant(pub(k), signRaw(k, grantJSON(t, c)), dev, tool, nil, t0); err != nil {
		t.Fatalf("a full-TTL grant: %v", err)
	}
	c.Expires++
	wantReject(t, "ttl+1s", k, signRaw(k, grantJSON(t, c)), t0, "grant lifetime is too long")
	c.Expires = 1 << 62
	wantReject(t, "far future", k, signRaw(k, grantJSON(t, c)), t0, "grant lifetime is too long")
}

func TestMalformed(t *testing.T) {
	k := newKey(t)
	good, err := MintGrant(k, dev, tool, who, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyGrant(pub(k), good, dev, tool, nil, t0); err != nil {
		t.Fatal(err)
	}
	head, sig, _ := strings.Cut(good, ".")
	valid := grantJSON(t, validGrant())
	trimmed := strings.TrimSuffix(valid, "}")

	// Every case but the encoding ones carries a valid signature, so only
	// the check under test can reject it.
	cases := map[string]string{
		"no dot":            head + sig,
		"extra part":        good + ".x",
		"empty signature":   head + ".",
		"padded signature":  head + "." + sig + "==",
		"bad claims base64": "!" + head[1:] + "." + sig,
		"bad sig base64":    head + "." + sig[:len(sig)-1] + "*",
		"short signature":   head + "." + sig[:len(sig)-4],
		"newline in sig":    head + "." + sig[:10] + "\n" + sig[10:],
		"newline in claims": head[:10] + "\r\n" + head[10:] + "." + sig,
		"trailing newline":  good + "\n",
		// The last character of a 64-byte signature carries two unused
		// bits; a lenient decoder would accept a second spelling.
		"non-canonical sig": head + "." + sig[:len(sig)-1] + string(alphabet[strings.IndexByte(alphabet, sig[len(sig)-1])^1]),

		"not json":          signRaw(k, "hello"),
		"json array":        signRaw(k, "[]"),
		"unknown field":     signRaw(k, trimmed+`,"admin":true}`),
		"trailing data":     signRaw(k, valid+"{}"),
		"trailing space":    signRaw(k, valid+" "),
		"leading space":     signRaw(k, " "+valid),
		"duplicate key":     signRaw(k, trimmed+`,"dev":"`+dev+`"}`),
		"case-folded key":   signRaw(k, strings.Replace(valid, `"dev"`, `"DEV"`, 1)),
		"null field":        signRaw(k, strings.Replace(valid, `"sub":"`+who+`"`, `"sub":null`, 1)),
		"missing principal": signRaw(k, grantJSON(t, Grant{Device: dev, Tool: tool, IssuedAt: t0.Unix(), Expires: t0.Unix() + 60, ID: validGrant().ID})),
		"string time":       signRaw(k, strings.Replace(valid, fmt.Sprintf(`"iat":%d`, t0.Unix()), fmt.Sprintf(`"iat":"%d"`, t0.Unix()), 1)),
	}
	for name, mutate := range map[string]func(*Grant){
		"short id":       func(c *Grant) { c.ID = "abcd" },
		"upper-case id":  func(c *Grant) { c.ID = strings.ToUpper(c.ID) },
		"non-hex id":     func(c *Grant) { c.ID = strings.Repeat("zz", 16) },
		"zero issued":    func(c *Grant) { c.IssuedAt, c.Expires = 0, 60 },
		"negative times": func(c *Grant) { c.IssuedAt, c.Expires = -1<<62, 1<<62 },
		"zero lifetime":  func(c *Grant) { c.Expires = c.IssuedAt },
		"backwards":      func(c *Grant) { c.Expires = c.IssuedAt - 1 },
	} {
		c := validGrant()
		mutate(&c)
		cases[name] = signRaw(k, grantJSON(t, c))
	}
	for name, tok := range cases {
		wantReject(t, name, k, tok, t0, "grant is malformed")
	}
}

func TestTooLong(t *testing.T) {
	k := newKey(t)
	c := validGrant()
	c.Principal = strings.Repeat("p", limits.MaxGrantBytes)
	tok := signRaw(k, grantJSON(t, c))
	wantReject(t, "oversize", k, tok, t0, "grant is malformed")

	if _, err := MintGrant(k, dev, tool, c.Principal, "", t0); !errcode.Is(err, errcode.InvalidArgument) {
		t.Fatalf("Mint of an oversize grant: %v", err)
	}
}

func TestMessagesAreContentFree(t *testing.T) {
	k := newKey(t)
	tok, err := MintGrant(k, "secret-device", "secret.tool", who, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"secret-device", dev} {
		_, err := VerifyGrant(pub(k), tok, d, tool, nil, t0)
		if err == nil || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), tok[:8]) {
			t.Errorf("device %s: %v", d, err)
		}
	}
}

func TestBadKeys(t *testing.T) {
	k := newKey(t)
	tok, err := MintGrant(k, dev, tool, who, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []ed25519.PublicKey{nil, pub(k)[:31]} {
		if _, err := VerifyGrant(p, tok, dev, tool, nil, t0); !errcode.Is(err, errcode.GrantInvalid) {
			t.Errorf("key of %d bytes: %v", len(p), err)
		}
	}
	if _, err := MintGrant(k[:10], dev, tool, who, "", t0); !errcode.Is(err, errcode.InvalidArgument) {
		t.Errorf("short signing key: %v", err)
	}
	for _, args := range [][3]string{{"", tool, who}, {dev, "", who}, {dev, tool, ""}} {
		if _, err := MintGrant(k, args[0], args[1], args[2], "", t0); !errcode.Is(err, errcode.InvalidArgument) {
			t.Errorf("Mint%q: %v", args, err)
		}
	}
}

func TestPublicKeyEncoding(t *testing.T) {
	k := newKey(t)
	s := EncodeGrantKey(pub(k))
	got, err := DecodeGrantKey(s)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(pub(k)) {
		t.Fatal("round trip changed the key")
	}
	short := base64.StdEncoding.EncodeToString(pub(k)[:31])
	for _, bad := range []string{"", "not base64!", short, s + "AAAA", strings.TrimRight(s, "=")} {
		if _, err := DecodeGrantKey(bad); !errcode.Is(err, errcode.InvalidArgument) {
			t.Errorf("DecodePublicKey(%q): %v", bad, err)
		}
	}
}

func TestFromMeta(t *testing.T) {
	cases := []struct {
		meta map[string]any
		want string
	}{
		{nil, ""},
		{map[string]any{}, ""},
		{map[string]any{"grant": "x"}, ""},
		{map[string]any{GrantMetaKey: 42}, ""},
		{map[string]any{GrantMetaKey: "tok"}, "tok"},
	}
	for _, c := range cases {
		if got := GrantFromMeta(c.meta); got != c.want {
			t.Errorf("FromMeta(%v) = %q, want %q", c.meta, got, c.want)
		}
	}
}

// FuzzVerify checks that Verify never panics and that nothing but a seeded
// valid token verifies. The fuzzing engine runs this setup in every worker
// process, so the key and the seeded tokens are fixed: each worker must
// agree on which tokens are valid.
func FuzzVerify(f *testing.F) {
	k := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	other := ed25519.NewKeyFromSeed([]byte(strings.Repeat("x", ed25519.SeedSize)))
	valid := map[string]bool{}
	for _, c := range []Grant{validGrant(), {Device: dev, Tool: tool, Principal: "p", IssuedAt: t0.Unix() - 30, Expires: t0.Unix() + 10, ID: strings.Repeat("0", 32)}} {
		tok := signRaw(k, grantJSON(f, c))
		if _, err := VerifyGrant(pub(k), tok, dev, tool, nil, t0); err != nil {
			f.Fatalf("seed does not verify: %v", err)
		}
		valid[tok] = true
		f.Add(tok)
		head, sig, _ := strings.Cut(tok, ".")
		f.Add(head)
		f.Add(head + "." + sig[:len(sig)-1])
		f.Add(signRaw(other, grantJSON(f, c)))
	}
	wrongTool := validGrant()
	wrongTool.Tool = "process.run"
	f.Add(signRaw(k, grantJSON(f, wrongTool)))
	f.Add("")
	f.Add(".")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := VerifyGrant(pub(k), token, dev, tool, nil, t0)
		if err != nil {
			if c != nil {
				t.Fatal("claims returned with an error")
			}
			if !errcode.Is(err, errcode.GrantInvalid) {
				t.Fatalf("error without grant_invalid: %v", err)
			}
			return
		}
		if !valid[token] {
			t.Fatalf("an unseeded token verified: %q", token)
		}
		if c.Device != dev || c.Tool != tool {
			t.Fatalf("verified claims for another call: %+v", c)
		}
	})
}

// TestBoundGrantAuthorizesItsCallOnly: a grant bound to a call verifies
// for exactly those arguments and no others, one byte changed, the tool's
// name moved into them, or none at all; a grant that names no call (an
// earlier relay's) verifies for any.
func TestBoundGrantAuthorizesItsCallOnly(t *testing.T) {
	k := newKey(t)
	args := []byte(`{"process_id":"7c4e2d1a-0000-4000-8000-000000000001"}`)
	tok, err := MintGrant(k, dev, tool, who, CallDigest(tool, args), t0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := VerifyGrant(pub(k), tok, dev, tool, args, t0)
	if err != nil {
		t.Fatalf("the bound call: %v", err)
	}
	if c.Call != CallDigest(tool, args) || len(c.Call) != 64 {
		t.Fatalf("claims name call %q", c.Call)
	}
	const other = "grant is for another call (its arguments differ)"
	changed := append([]byte(nil), args...)
	changed[len(changed)-3] ^= 1
	for name, a := range map[string][]byte{
		"one byte changed": changed,
		"no arguments":     nil,
		"empty object":     []byte(`{}`),
		"spaced":           []byte(`{ "process_id":"7c4e2d1a-0000-4000-8000-000000000001"}`),
	} {
		if _, err := VerifyGrant(pub(k), tok, dev, tool, a, t0); err == nil || errcode.From(err).Message != other {
			t.Errorf("%s: %v, want %q", name, err, other)
		}
	}
	// The name is length-prefixed: moving bytes between the name and the
	// arguments makes another digest.
	if CallDigest("ab", []byte("c")) == CallDigest("a", []byte("bc")) {
		t.Error("the digest does not separate the tool's name from its arguments")
	}
	if CallDigest(tool, nil) != CallDigest(tool, []byte{}) {
		t.Error("no arguments and empty arguments differ")
	}
	unbound, err := MintGrant(k, dev, tool, who, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyGrant(pub(k), unbound, dev, tool, changed, t0); err != nil {
		t.Fatalf("a grant naming no call: %v", err)
	}
}

// TestMalformedCallDigest: a signed grant whose call digest is not 32
// bytes of lower-case hex is refused as malformed, before any comparison.
func TestMalformedCallDigest(t *testing.T) {
	k := newKey(t)
	for _, d := range []string{"ab", strings.Repeat("AB", 32), strings.Repeat("ab", 33), strings.Repeat("zz", 32)} {
		c := validGrant()
		c.Call = d
		wantReject(t, "call "+d, k, signRaw(k, grantJSON(t, c)), t0, "grant is malformed")
	}
}
