// Package cimd fetches Client ID Metadata Documents: an OAuth client whose
// client_id is an HTTPS URL publishes its metadata there, and the relay,
// as the authorization server, fetches it. That fetch is a request the
// relay makes on a stranger's behalf, so it is HTTPS only, refuses every
// address that is not globally reachable at connection time (a name that
// resolves there, even on a second lookup, is refused) unless told
// otherwise, follows no redirect, and is bounded in time and size, in
// fetches at once and per host. What it fetched is kept a while, and a
// failure a short while, within bounds.
package cimd

import (
	"container/list"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/namechars"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// Document is what the relay uses of a client's metadata document.
type Document struct {
	ClientID     string   `json:"client_id"`
	ClientName   string   `json:"client_name"`
	RedirectURIs []string `json:"redirect_uris"`
	// TokenEndpointAuthMethod is "none" (or absent): the relay serves
	// public clients only.
	TokenEndpointAuthMethod string `json:"token_endpoint_auth_method"`
}

// Options tunes a Fetcher.
type Options struct {
	// AllowPrivate lets a document live on any address, Public or not:
	// loopback, private, link-local and the other special-purpose ranges
	// (a client inside the network).
	AllowPrivate bool
	// RootCAs, when set, are the CAs a document's certificate may chain
	// to, besides the system's.
	RootCAs *x509.CertPool
	// Now is the cache's clock; nil is time.Now.
	Now func() time.Time
}

// Fetcher fetches and caches documents; it is safe for concurrent use.
type Fetcher struct {
	client *http.Client
	now    func() time.Time
	// fetching holds a slot per fetch under way.
	fetching chan struct{}

	mu sync.Mutex
	// byHost counts the fetches under way per host (hostKey).
	byHost map[string]int
	// docs holds the documents fetched, failures the errors of the
	// fetches that failed, both by URL.
	docs     *table[*Document]
	failures *table[error]
}

// table keeps values by URL until they expire, at most max of them: the
// one kept longest ago goes first. Its user holds the Fetcher's mu.
type table[V any] struct {
	max    int
	recent *list.List // of *entry[V], the most recently kept first
	byURL  map[string]*list.Element
}

type entry[V any] struct {
	url     string
	v       V
	expires time.Time
}

func newTable[V any](max int) *table[V] {
	return &table[V]{max: max, recent: list.New(), byURL: map[string]*list.Element{}}
}

// get returns what is kept for u, if it has not expired at now; an
// expired value is forgotten.
func (t *table[V]) get(u string, now time.Time) (V, bool) {
	if e, ok := t.byURL[u]; ok {
		if en := e.Value.(*entry[V]); now.Before(en.expires) {
			return en.v, true
		}
		t.recent.Remove(e)
		delete(t.byURL, u)
	}
	var none V
	return none, false
}

// put keeps v for u until expires, forgetting the oldest value beyond
// t.max.
func (t *table[V]) put(u string, v V, expires time.Time) {
	if e, ok := t.byURL[u]; ok {
		t.recent.Remove(e)
	}
	for t.recent.Len() >= t.max {
		oldest := t.recent.Back()
		t.recent.Remove(oldest)
		delete(t.byURL, oldest.Value.(*entry[V]).url)
	}
	t.byURL[u] = t.recent.PushFront(&entry[V]{url: u, v: v, expires: expires})
}

// ErrAddress refuses a document on an address the fetcher may not reach.
// It names no address and no range: the stranger who named the URL
// learns nothing of where a name resolves inside the network.
var ErrAddress = errors.New("client metadata document is on an address that is not public (loopback, private, link-local or another special-purpose range)")

// New returns a Fetcher.
func New(o Options) *Fetcher {
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.RootCAs != nil {
		tlsConf.RootCAs = o.RootCAs
	}
	// A host that does not answer is given up on well before the whole
	// fetch's bound, so it holds its slots no longer than it must.
	dialer := &net.Dialer{Timeout: limits.CIMDConnectTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		// Judged on the address being connected to, after resolution: a
		// name that answered a public address first and a private one now
		// is caught here.
		return checkAddress(address, o.AllowPrivate)
	}}
	tr := &http.Transport{
		// No proxy: the address checked must be the document's.
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		TLSClientConfig:        tlsConf,
		TLSHandshakeTimeout:    limits.CIMDConnectTimeout,
		ResponseHeaderTimeout:  limits.CIMDTimeout,
		MaxResponseHeaderBytes: 16 << 10,
		MaxIdleConns:           16,
		IdleConnTimeout:        time.Minute,
		ForceAttemptHTTP2:      true,
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Fetcher{
		client: &http.Client{Transport: tr, Timeout: limits.CIMDTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		now: now, fetching: make(chan struct{}, limits.CIMDMaxFetching), byHost: map[string]int{},
		docs: newTable[*Document](limits.CIMDCacheEntries), failures: newTable[error](limits.CIMDFailureEntries),
	}
}

// parseClientID returns s parsed if it has the form of a client ID
// metadata document's URL: HTTPS, a host, a path other than "/", no
// user, no fragment, no dot segments.
func parseClientID(s string) (*url.URL, bool) {
	// Printable bounds the length too.
	if !namechars.Printable(s, store.MaxOAuthTextBytes) || strings.ContainsAny(s, " \\") {
		return nil, false
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.Hostname() == "" || u.User != nil || u.Fragment != "" ||
		strings.Contains(s, "#") || u.Path == "" || u.Path == "/" || u.Opaque != "" {
		return nil, false
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return nil, false
		}
	}
	return u, true
}

// IsClientIDURL reports whether s has the form of a client ID metadata
// document's URL: HTTPS, a host, a path other than "/", no user, no
// fragment, no dot segments.
func IsClientIDURL(s string) bool {
	_, ok := parseClientID(s)
	return ok
}

// hostKey is the host whose fetches u's counts among: its name without
// port, case or a final dot, or its address in one form, so that one
// host's documents share their bound whatever port or spelling names
// them.
func hostKey(u *url.URL) string {
	h := u.Hostname()
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().String()
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

var (
	// ErrBusy is Get's answer while limits.CIMDMaxFetching fetches are
	// under way: the client is not refused, only not checked now.
	ErrBusy = errcode.New(errcode.Unavailable, "the relay is fetching as many client metadata documents as it may; try again shortly")
	// ErrHostBusy is Get's answer while limits.CIMDMaxFetchingPerHost
	// fetches from the document's host are under way: a slow host holds
	// only its own slots, and other hosts' documents are still fetched.
	ErrHostBusy = errcode.New(errcode.Unavailable, "the relay is fetching as many client metadata documents from this host as it may; try again shortly")
)

// Get returns the document at clientID, from the cache while it is
// fresh. Errors are InvalidArgument (the client is refused), ErrHostBusy
// or ErrBusy. A fetch that failed is answered with its error for
// limits.CIMDFailureTTL without fetching again, unless it failed because
// ctx ended: a stranger who gives up early must not make a good client's
// document fail for others.
func (f *Fetcher) Get(ctx context.Context, clientID string) (*Document, error) {
	u, ok := parseClientID(clientID)
	if !ok {
		return nil, errcode.New(errcode.InvalidArgument, "client_id is not an HTTPS URL with a path")
	}
	host := hostKey(u)
	now := f.now()
	f.mu.Lock()
	if doc, ok := f.docs.get(clientID, now); ok {
		f.mu.Unlock()
		return doc, nil
	}
	if err, ok := f.failures.get(clientID, now); ok {
		f.mu.Unlock()
		return nil, err
	}
	if f.byHost[host] >= limits.CIMDMaxFetchingPerHost {
		f.mu.Unlock()
		return nil, ErrHostBusy
	}
	select {
	case f.fetching <- struct{}{}:
	default:
		f.mu.Unlock()
		return nil, ErrBusy
	}
	f.byHost[host]++
	f.mu.Unlock()

	doc, ttl, err := f.fetch(ctx, clientID)

	f.mu.Lock()
	defer f.mu.Unlock()
	<-f.fetching
	if f.byHost[host]--; f.byHost[host] == 0 {
		delete(f.byHost, host)
	}
	if err == nil && ttl > 0 {
		f.docs.put(clientID, doc, now.Add(ttl))
	} else if err != nil && ctx.Err() == nil {
		f.failures.put(clientID, err, now.Add(limits.CIMDFailureTTL))
	}
	return doc, err
}

// cached is how many documents the cache holds.
func (f *Fetcher) cached() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.docs.recent.Len()
}

// fetch returns the document at clientID and how long it may be kept.
func (f *Fetcher) fetch(ctx context.Context, clientID string) (*Document, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, limits.CIMDTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientID, nil)
	if err != nil {
		return nil, 0, errcode.New(errcode.InvalidArgument, "client_id is not a URL the relay can fetch")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		if errors.Is(err, ErrAddress) {
			return nil, 0, errcode.New(errcode.InvalidArgument, "%v", ErrAddress)
		}
		return nil, 0, errcode.New(errcode.InvalidArgument, "client metadata document could not be fetched")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, errcode.New(errcode.InvalidArgument, "client metadata document answered HTTP %d (redirects are not followed)", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limits.CIMDMaxBytes+1))
	if err != nil {
		return nil, 0, errcode.New(errcode.InvalidArgument, "client metadata document could not be read")
	}
	doc, err := Decode(body, clientID)
	return doc, cacheFor(resp.Header.Get("Cache-Control")), err
}

// cacheFor is how long a document may be kept: limits.CIMDCacheTTL, less
// when its Cache-Control's max-age says so, nothing for no-store or
// no-cache.
func cacheFor(cc string) time.Duration {
	ttl := limits.CIMDCacheTTL
	for _, d := range strings.Split(strings.ToLower(cc), ",") {
		d = strings.TrimSpace(d)
		if d == "no-store" || d == "no-cache" {
			return 0
		}
		if age, ok := strings.CutPrefix(d, "max-age="); ok {
			n, err := strconv.ParseInt(strings.Trim(age, `"`), 10, 64)
			if err != nil {
				return 0
			}
			// Within 0 and the bound before it is made a Duration, which a
			// huge number would overflow.
			ttl = time.Duration(min(max(n, 0), int64(ttl/time.Second))) * time.Second
		}
	}
	return ttl
}

// Decode reads a document fetched from clientID: JSON of at most
// limits.CIMDMaxBytes whose client_id is that URL, with 1 to
// limits.OAuthMaxRedirectURIs redirect URIs, for a public client. Members
// it does not use are ignored, as RFC 7591 asks of metadata.
func Decode(data []byte, clientID string) (*Document, error) {
	if len(data) > limits.CIMDMaxBytes {
		return nil, errcode.New(errcode.InvalidArgument, "client metadata document is larger than %d bytes", limits.CIMDMaxBytes)
	}
	var d Document
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, errcode.New(errcode.InvalidArgument, "client metadata document is not a JSON object of the expected types")
	}
	if d.ClientID != clientID {
		return nil, errcode.New(errcode.InvalidArgument, "client metadata document's client_id is not the URL it was fetched from")
	}
	if len(d.RedirectURIs) == 0 || len(d.RedirectURIs) > limits.OAuthMaxRedirectURIs {
		return nil, errcode.New(errcode.InvalidArgument, "client metadata document lists 1 to %d redirect_uris", limits.OAuthMaxRedirectURIs)
	}
	if d.TokenEndpointAuthMethod != "" && d.TokenEndpointAuthMethod != "none" {
		return nil, errcode.New(errcode.InvalidArgument, "client metadata document asks for a token_endpoint_auth_method other than none; the relay serves public clients only")
	}
	for _, u := range d.RedirectURIs {
		if u == "" || !namechars.Printable(u, store.MaxOAuthTextBytes) {
			return nil, errcode.New(errcode.InvalidArgument, "client metadata document's redirect_uris are printable URLs of at most %d bytes", store.MaxOAuthTextBytes)
		}
	}
	// A name the relay cannot show as it is is not shown at all: the
	// consent page names the redirect's host instead.
	if !namechars.Printable(d.ClientName, store.MaxClientNameBytes) {
		d.ClientName = ""
	}
	return &d, nil
}
