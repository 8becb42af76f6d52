package cimd

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// TestDecodeAtItsBounds: a document of exactly limits.CIMDMaxBytes is
// read and one byte more is not; 1 and limits.OAuthMaxRedirectURIs
// redirect URIs are taken and one more is not; an authentication method
// other than none is refused; a name at its bound is kept, one past it
// is not shown.
func TestDecodeAtItsBounds(t *testing.T) {
	const id = "https://c.example/c.json"
	doc := func(uris int, extra string) string {
		var list []string
		for range uris {
			list = append(list, "https://c.example/cb")
		}
		b, _ := json.Marshal(list)
		return `{"client_id":"` + id + `","redirect_uris":` + string(b) + extra + `}`
	}
	padded := func(size int) []byte {
		base := doc(1, `,"pad":""`)
		return []byte(strings.Replace(base, `"pad":""`, `"pad":"`+strings.Repeat("x", size-len(base))+`"`, 1))
	}
	for name, c := range map[string]struct {
		body []byte
		ok   bool
	}{
		"at the size bound":         {padded(limits.CIMDMaxBytes), true},
		"one byte past":             {padded(limits.CIMDMaxBytes + 1), false},
		"one redirect URI":          {[]byte(doc(1, "")), true},
		"the most redirect URIs":    {[]byte(doc(limits.OAuthMaxRedirectURIs, "")), true},
		"one redirect URI too many": {[]byte(doc(limits.OAuthMaxRedirectURIs+1, "")), false},
		"a secret asked for":        {[]byte(doc(1, `,"token_endpoint_auth_method":"client_secret_post"`)), false},
		"a URI at its bound":        {[]byte(`{"client_id":"` + id + `","redirect_uris":["https://c.example/` + strings.Repeat("x", store.MaxOAuthTextBytes-len("https://c.example/")) + `"]}`), true},
		"a URI past its bound":      {[]byte(`{"client_id":"` + id + `","redirect_uris":["https://c.example/` + strings.Repeat("x", store.MaxOAuthTextBytes+1-len("https://c.example/")) + `"]}`), false},
	} {
		if _, err := Decode(c.body, id); (err == nil) != c.ok {
			t.Errorf("%s (%d bytes): %v", name, len(c.body), err)
		}
	}
	for size, shown := range map[int]bool{store.MaxClientNameBytes: true, store.MaxClientNameBytes + 1: false} {
		name := strings.Repeat("n", size)
		d, err := Decode([]byte(doc(1, `,"client_name":"`+name+`"`)), id)
		if err != nil || (d.ClientName == name) != shown {
			t.Errorf("a %d-byte name: %+v %v", size, d, err)
		}
	}
}

// TestCacheForEachDirective: max-age under the cache's bound shortens it,
// at or over it keeps the bound; any directive list is read whole, and
// the first no-store or no-cache wins.
func TestCacheForEachDirective(t *testing.T) {
	bound := int64(limits.CIMDCacheTTL / time.Second)
	for cc, want := range map[string]time.Duration{
		"public, max-age=20":          20 * time.Second,
		"max-age=" + itoa(bound-1):    time.Duration(bound-1) * time.Second,
		"max-age=" + itoa(bound):      limits.CIMDCacheTTL,
		"max-age=1":                   time.Second,
		"max-age=-5":                  0,
		"max-age=20, no-store":        0,
		"private":                     limits.CIMDCacheTTL,
		"MAX-AGE=40":                  40 * time.Second,
		"max-age=0, max-age=20":       0,
		"max-age=30, max-age=20":      20 * time.Second,
		"max-age=9223372036854775807": limits.CIMDCacheTTL,
	} {
		if got := cacheFor(cc); got != want {
			t.Errorf("%q: %v, want %v", cc, got, want)
		}
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestIsClientIDURLAtItsBound: a URL of store.MaxOAuthTextBytes is a
// client ID, one byte more is not.
func TestIsClientIDURLAtItsBound(t *testing.T) {
	base := "https://c.example/"
	for size, want := range map[int]bool{store.MaxOAuthTextBytes: true, store.MaxOAuthTextBytes + 1: false} {
		if got := IsClientIDURL(base + strings.Repeat("x", size-len(base))); got != want {
			t.Errorf("a %d-byte URL: %v, want %v", size, got, want)
		}
	}
}
