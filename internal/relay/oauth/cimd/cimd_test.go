package cimd

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// docServer serves client metadata documents over TLS on loopback: at
// /good a good one, at /big one past the bound, at /exact one at it, at
// /moved a redirect, at /other one naming another client ID.
type docServer struct {
	*httptest.Server
	hits atomic.Int64
}

func newDocServer(t *testing.T) *docServer {
	t.Helper()
	d := &docServer{}
	d.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.hits.Add(1)
		self := "https://" + r.Host + r.URL.Path
		switch {
		case r.URL.Path == "/big":
			fmt.Fprintf(w, `{"client_id":%q,"redirect_uris":["https://c.example/cb"],"pad":"%s"}`, self, strings.Repeat("x", limits.CIMDMaxBytes))
		case r.URL.Path == "/exact":
			base := fmt.Sprintf(`{"client_id":%q,"redirect_uris":["https://c.example/cb"],"pad":""}`, self)
			fmt.Fprint(w, strings.Replace(base, `"pad":""`, `"pad":"`+strings.Repeat("x", limits.CIMDMaxBytes-len(base))+`"`, 1))
		case r.URL.Path == "/moved":
			http.Redirect(w, r, "/good", http.StatusFound)
		case r.URL.Path == "/other":
			fmt.Fprintf(w, `{"client_id":"https://elsewhere.example/c.json","redirect_uris":["https://c.example/cb"]}`)
		case r.URL.Path == "/secret":
			fmt.Fprintf(w, `{"client_id":%q,"redirect_uris":["https://c.example/cb"],"token_endpoint_auth_method":"private_key_jwt"}`, self)
		case r.URL.Path == "/nostore":
			w.Header().Set("Cache-Control", "no-store")
			fmt.Fprintf(w, `{"client_id":%q,"redirect_uris":["https://c.example/cb"]}`, self)
		case r.URL.Path == "/short":
			w.Header().Set("Cache-Control", "public, max-age=60")
			fmt.Fprintf(w, `{"client_id":%q,"redirect_uris":["https://c.example/cb"]}`, self)
		case strings.HasPrefix(r.URL.Path, "/good"):
			fmt.Fprintf(w, `{"client_id":%q,"client_name":"Good client","redirect_uris":["https://c.example/cb"],"logo_uri":"https://c.example/l.png"}`, self)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *docServer) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(d.Certificate())
	return p
}

func TestFetchesCachesAndBounds(t *testing.T) {
	d := newDocServer(t)
	now := time.Now()
	f := New(Options{AllowPrivate: true, RootCAs: d.pool(), Now: func() time.Time { return now }})
	doc, err := f.Get(context.Background(), d.URL+"/good")
	if err != nil || doc.ClientName != "Good client" || len(doc.RedirectURIs) != 1 {
		t.Fatalf("good: %+v %v", doc, err)
	}
	if _, err := f.Get(context.Background(), d.URL+"/good"); err != nil || d.hits.Load() != 1 {
		t.Fatalf("cached: %v, %d fetches", err, d.hits.Load())
	}
	now = now.Add(limits.CIMDCacheTTL)
	if _, err := f.Get(context.Background(), d.URL+"/good"); err != nil || d.hits.Load() != 2 {
		t.Fatalf("after the cache's lifetime: %v, %d fetches", err, d.hits.Load())
	}
	if _, err := f.Get(context.Background(), d.URL+"/exact"); err != nil {
		t.Fatalf("a document of %d bytes: %v", limits.CIMDMaxBytes, err)
	}
	for _, path := range []string{"/big", "/moved", "/other", "/secret", "/missing"} {
		if _, err := f.Get(context.Background(), d.URL+path); !errcode.Is(err, errcode.InvalidArgument) {
			t.Errorf("%s: %v", path, err)
		}
	}
	for i := range limits.CIMDCacheEntries + 10 {
		if _, err := f.Get(context.Background(), fmt.Sprintf("%s/good/%d", d.URL, i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.cached(); n != limits.CIMDCacheEntries {
		t.Errorf("cache holds %d documents, want %d", n, limits.CIMDCacheEntries)
	}
}

func TestCacheControlAndBusy(t *testing.T) {
	d := newDocServer(t)
	now := time.Now()
	f := New(Options{AllowPrivate: true, RootCAs: d.pool(), Now: func() time.Time { return now }})
	get := func(path string) {
		t.Helper()
		if _, err := f.Get(context.Background(), d.URL+path); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	get("/nostore")
	get("/nostore")
	if d.hits.Load() != 2 || f.cached() != 0 {
		t.Fatalf("no-store: %d fetches, want 2; %d documents kept", d.hits.Load(), f.cached())
	}
	get("/short")
	now = now.Add(59 * time.Second)
	get("/short")
	if d.hits.Load() != 3 {
		t.Fatalf("max-age=60 within a minute: %d fetches, want 3", d.hits.Load())
	}
	now = now.Add(time.Second)
	get("/short")
	if d.hits.Load() != 4 {
		t.Fatalf("max-age=60 after a minute: %d fetches, want 4", d.hits.Load())
	}
	// As many fetches under way as allowed: the next waits for none.
	for range limits.CIMDMaxFetching {
		f.fetching <- struct{}{}
	}
	if _, err := f.Get(context.Background(), d.URL+"/good"); err != ErrBusy {
		t.Fatalf("busy: %v", err)
	}
	<-f.fetching
	get("/good")
	for k, want := range map[string]time.Duration{"": limits.CIMDCacheTTL, "max-age=30": 30 * time.Second, "max-age=0": 0,
		"No-Cache": 0, "max-age=x": 0, `max-age="10"`: 10 * time.Second, "max-age=999999": limits.CIMDCacheTTL} {
		if got := cacheFor(k); got != want {
			t.Errorf("%q: %v, want %v", k, got, want)
		}
	}
}

func TestRefusesPrivateAddressesAtConnectionTime(t *testing.T) {
	d := newDocServer(t)
	f := New(Options{RootCAs: d.pool()})
	if _, err := f.Get(context.Background(), d.URL+"/good"); !errcode.Is(err, errcode.InvalidArgument) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("loopback document: %v", err)
	}
	// A name, judged by what it resolves to when connecting.
	named := strings.Replace(d.URL, "127.0.0.1", "localhost", 1)
	if _, err := f.Get(context.Background(), named+"/good"); !errcode.Is(err, errcode.InvalidArgument) {
		t.Fatalf("localhost document: %v", err)
	}
	if d.hits.Load() != 0 {
		t.Fatalf("the refused fetches reached the server %d times", d.hits.Load())
	}
	// Without the CA, the certificate is refused.
	if _, err := New(Options{AllowPrivate: true}).Get(context.Background(), d.URL+"/good"); !errcode.Is(err, errcode.InvalidArgument) {
		t.Fatalf("untrusted certificate: %v", err)
	}
}

func TestPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		"93.184.216.34": true, "2606:2800:220:1::1": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fd00::1": false, "100.64.0.1": false, "0.0.0.0": false,
		"::": false, "224.0.0.1": false, "::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false,
	} {
		if got := Public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %v", addr, got)
		}
	}
	if Public(netip.Addr{}) {
		t.Error("the zero address is public")
	}
}

func TestIsClientIDURL(t *testing.T) {
	for u, want := range map[string]bool{
		"https://c.example/client.json": true, "https://c.example:8443/a/b": true,
		"http://c.example/client.json": false, "https://c.example": false, "https://c.example/": false,
		"https://u@c.example/c": false, "https://c.example/c#f": false, "https://c.example/a/../c": false,
		"https://c.example/./c": false, "ccc_0123": false, "https:///c": false, "https://c.example/c d": false,
	} {
		if got := IsClientIDURL(u); got != want {
			t.Errorf("%q: %v", u, got)
		}
	}
	if _, err := New(Options{}).Get(context.Background(), "http://c.example/c"); !errcode.Is(err, errcode.InvalidArgument) {
		t.Errorf("plain HTTP: %v", err)
	}
}

func TestDecode(t *testing.T) {
	const id = "https://c.example/c.json"
	for body, ok := range map[string]bool{
		`{"client_id":"` + id + `","redirect_uris":["https://c.example/cb"]}`:                                     true,
		`{"client_id":"` + id + `","redirect_uris":["https://c.example/cb"],"token_endpoint_auth_method":"none"}`: true,
		`{"client_id":"` + id + `","redirect_uris":[]}`:                                                           false,
		`{"client_id":"` + id + `","redirect_uris":[""]}`:                                                         false,
		`{"client_id":"` + id + `","redirect_uris":"https://c.example/cb"}`:                                       false,
		`{"client_id":"https://c.example/other","redirect_uris":["https://c.example/cb"]}`:                        false,
		`[]`: false,
	} {
		_, err := Decode([]byte(body), id)
		if (err == nil) != ok {
			t.Errorf("%s: %v", body, err)
		}
	}
	doc, err := Decode([]byte(`{"client_id":"`+id+`","client_name":"a\u202eb","redirect_uris":["https://c.example/cb"]}`), id)
	if err != nil || doc.ClientName != "" {
		t.Errorf("a name with a bidi override: %+v %v", doc, err)
	}
}

func FuzzDecode(f *testing.F) {
	const id = "https://c.example/c.json"
	f.Add([]byte(`{"client_id":"` + id + `","client_name":"C","redirect_uris":["https://c.example/cb"]}`))
	f.Add([]byte(`{"client_id":"` + id + `","redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none"}`))
	f.Add([]byte(`{"client_id":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := Decode(data, id)
		if err != nil {
			if !errcode.Is(err, errcode.InvalidArgument) {
				t.Fatalf("%q: %v", data, err)
			}
			return
		}
		if doc.ClientID != id || len(doc.RedirectURIs) == 0 || len(doc.RedirectURIs) > limits.OAuthMaxRedirectURIs {
			t.Fatalf("%q: accepted %+v", data, doc)
		}
	})
}
