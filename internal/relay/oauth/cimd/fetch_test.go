package cimd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// tlsServerOn starts an HTTPS server on ip, a loopback address, with a
// certificate of its own for that address (httptest's names 127.0.0.1
// only); its Certificate is the CA to trust.
func tlsServerOn(t *testing.T, ip string, h http.Handler) *httptest.Server {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP(ip)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(h)
	s.Listener.Close()
	s.Listener = l
	s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// slowHost is an HTTPS host on 127.0.0.2 that holds every request until
// the test lets one go (release), then serves a good document.
type slowHost struct {
	*httptest.Server
	arrived atomic.Int64
	release chan struct{}
}

func newSlowHost(t *testing.T) *slowHost {
	t.Helper()
	h := &slowHost{release: make(chan struct{})}
	done := make(chan struct{})
	h.Server = tlsServerOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.arrived.Add(1)
		select {
		case <-h.release:
		case <-done:
		}
		fmt.Fprintf(w, `{"client_id":%q,"redirect_uris":["https://c.example/cb"]}`, "https://"+r.Host+r.URL.Path)
	}))
	// Before the server's Close, which waits for the requests it holds.
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(done) }) })
	return h
}

// waitFor polls cond for a few seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
	}
}

// TestASlowHostHoldsOnlyItsOwnSlots: as many requests as the relay
// fetches at once, all naming one host that does not answer, get that
// host's limits.CIMDMaxFetchingPerHost fetches, and the rest are refused
// at once, not queued; a document on another host is still fetched. A
// slot the host gives back is its own to use again, and no more.
func TestASlowHostHoldsOnlyItsOwnSlots(t *testing.T) {
	slow, other := newSlowHost(t), newDocServer(t)
	cas := other.pool()
	cas.AddCert(slow.Certificate())
	f := New(Options{AllowPrivate: true, RootCAs: cas})
	results := make(chan error, limits.CIMDMaxFetching+2)
	get := func(i int) {
		_, err := f.Get(context.Background(), fmt.Sprintf("%s/c/%d", slow.URL, i))
		results <- err
	}
	for i := range limits.CIMDMaxFetching {
		go get(i)
	}
	refused := 0
	waitFor(t, "the fetches to reach the host or be refused", func() bool {
		select {
		case err := <-results:
			if err != ErrHostBusy {
				t.Fatalf("a fetch from the slow host: %v", err)
			}
			refused++
		default:
		}
		return int(slow.arrived.Load())+refused == limits.CIMDMaxFetching
	})
	if doc, err := f.Get(context.Background(), other.URL+"/good"); err != nil || doc.ClientName != "Good client" {
		t.Fatalf("another host's document, while the slow host holds its slots: %+v %v", doc, err)
	}
	if n := slow.arrived.Load(); n != limits.CIMDMaxFetchingPerHost {
		t.Fatalf("%d fetches at once from one host, want %d", n, limits.CIMDMaxFetchingPerHost)
	}
	// One fetch ends: one more may start, and the next is refused.
	slow.release <- struct{}{}
	if err := <-results; err != nil {
		t.Fatalf("the fetch let go: %v", err)
	}
	go get(limits.CIMDMaxFetching)
	waitFor(t, "the next fetch to reach the host", func() bool {
		return slow.arrived.Load() == int64(limits.CIMDMaxFetchingPerHost)+1
	})
	if _, err := f.Get(context.Background(), slow.URL+"/c/last"); err != ErrHostBusy {
		t.Fatalf("a third fetch from the host: %v", err)
	}
	for range limits.CIMDMaxFetchingPerHost {
		slow.release <- struct{}{}
		if err := <-results; err != nil {
			t.Fatalf("a fetch let go: %v", err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.byHost) != 0 || len(f.fetching) != 0 {
		t.Errorf("nothing is fetched, yet %v per host and %d in all are counted", f.byHost, len(f.fetching))
	}
}

// TestHostKey: a host's fetches count together whatever port, case, final
// dot or form of its address names it.
func TestHostKey(t *testing.T) {
	for u, want := range map[string]string{
		"https://C.Example./a": "c.example", "https://c.example:8443/a": "c.example",
		"https://[::ffff:127.0.0.2]:1/a": "127.0.0.2", "https://127.0.0.2:2/a": "127.0.0.2",
		"https://[2001:DB8:0::1]/a": "2001:db8::1", "https://[fe80::1%25eth0]/a": "fe80::1%eth0",
	} {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		if got := hostKey(p); got != want {
			t.Errorf("%s: %q, want %q", u, got, want)
		}
	}
}

// TestAFailureIsKeptBriefly: a fetch that failed is answered with its
// error for limits.CIMDFailureTTL without reaching the host again, and
// fetched again after.
func TestAFailureIsKeptBriefly(t *testing.T) {
	d := newDocServer(t)
	now := time.Now()
	f := New(Options{AllowPrivate: true, RootCAs: d.pool(), Now: func() time.Time { return now }})
	for _, path := range []string{"/missing", "/other"} {
		d.hits.Store(0)
		first, err := f.Get(context.Background(), d.URL+path)
		if !errcode.Is(err, errcode.InvalidArgument) || first != nil {
			t.Fatalf("%s: %+v %v", path, first, err)
		}
		now = now.Add(limits.CIMDFailureTTL - time.Nanosecond)
		if doc, again := f.Get(context.Background(), d.URL+path); again != err || doc != nil || d.hits.Load() != 1 {
			t.Fatalf("%s within the failure's time: %+v %v, %d fetches", path, doc, again, d.hits.Load())
		}
		now = now.Add(time.Nanosecond)
		if _, again := f.Get(context.Background(), d.URL+path); !errcode.Is(again, errcode.InvalidArgument) || d.hits.Load() != 2 {
			t.Fatalf("%s after the failure's time: %v, %d fetches", path, again, d.hits.Load())
		}
	}
	// Only that URL: the host's other documents are fetched.
	if _, err := f.Get(context.Background(), d.URL+"/good"); err != nil {
		t.Fatal(err)
	}
}

// TestAFailureTheCallerCausedIsNotKept: a fetch that failed because its
// caller gave up says nothing of the document, which the next caller
// gets.
func TestAFailureTheCallerCausedIsNotKept(t *testing.T) {
	d := newDocServer(t)
	f := New(Options{AllowPrivate: true, RootCAs: d.pool()})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Get(ctx, d.URL+"/good"); err == nil {
		t.Fatal("a fetch for a caller that gave up succeeded")
	}
	if doc, err := f.Get(context.Background(), d.URL+"/good"); err != nil || doc.ClientName != "Good client" {
		t.Fatalf("the next caller: %+v %v", doc, err)
	}
}

// TestFailuresKeptAreBounded: at most limits.CIMDFailureEntries failures
// are kept, the oldest forgotten first. The fetches are refused before
// they connect (loopback without AllowPrivate).
func TestFailuresKeptAreBounded(t *testing.T) {
	f := New(Options{})
	id := func(i int) string { return fmt.Sprintf("https://127.0.0.1:1/c/%d", i) }
	for i := range limits.CIMDFailureEntries + 10 {
		if _, err := f.Get(context.Background(), id(i)); !errcode.Is(err, errcode.InvalidArgument) {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, first := f.failures.byURL[id(0)]
	_, newest := f.failures.byURL[id(limits.CIMDFailureEntries+9)]
	if n := f.failures.recent.Len(); n != limits.CIMDFailureEntries || first || !newest {
		t.Errorf("%d failures kept (the oldest %v, the newest %v), want %d", n, first, newest, limits.CIMDFailureEntries)
	}
}

// silentHost is a loopback address whose listener never accepts and whose
// queue is full: a connection to it is never answered.
func silentHost(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	// A backlog of 0 holds one connection; Linux drops the SYNs of the
	// next while it is full.
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return addr
}

// TestAHostThatDoesNotAnswerIsGivenUpOnSoon: a connection not made within
// limits.CIMDConnectTimeout ends the fetch, well before
// limits.CIMDTimeout, and the failure is kept: the next request for it
// is answered at once.
func TestAHostThatDoesNotAnswerIsGivenUpOnSoon(t *testing.T) {
	id := "https://" + silentHost(t) + "/client.json"
	f := New(Options{AllowPrivate: true})
	start := time.Now()
	if _, err := f.Get(context.Background(), id); !errcode.Is(err, errcode.InvalidArgument) {
		t.Fatalf("a host that does not answer: %v", err)
	}
	if took := time.Since(start); took < limits.CIMDConnectTimeout || took >= (limits.CIMDConnectTimeout+limits.CIMDTimeout)/2 {
		t.Fatalf("given up on after %v, want %v", took, limits.CIMDConnectTimeout)
	}
	start = time.Now()
	if _, err := f.Get(context.Background(), id); !errcode.Is(err, errcode.InvalidArgument) || time.Since(start) > limits.CIMDConnectTimeout/2 {
		t.Fatalf("again: %v after %v", err, time.Since(start))
	}
}
