// Package cimd fetches Client ID Metadata Documents: an OAuth client whose
// client_id is an HTTPS URL publishes its metadata there, and the relay,
// as the authorization server, fetches it. That fetch is a request the
// relay makes on a stranger's behalf, so it is HTTPS only, refuses
// loopback, private and link-local addresses at connection time (a name
// that resolves there, even on a second lookup, is refused) unless told
// otherwise, follows no redirect, and is bounded in time and size. What
// it fetched is kept a while, within bounds.
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
	// AllowPrivate lets a document live on a loopback, private or
	// link-local address (a client inside the network).
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

	mu     sync.Mutex
	recent *list.List // of *entry, most recently fetched first
	byURL  map[string]*list.Element
}

type entry struct {
	url     string
	doc     *Document
	expires time.Time
}

// ErrAddress refuses a document on an address the fetcher may not reach.
var ErrAddress = errors.New("client metadata document is on a loopback, private or link-local address")

// New returns a Fetcher.
func New(o Options) *Fetcher {
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.RootCAs != nil {
		tlsConf.RootCAs = o.RootCAs
	}
	dialer := &net.Dialer{Timeout: limits.CIMDTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		// Judged on the address being connected to, after resolution: a
		// name that answered a public address first and a private one now
		// is caught here.
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return ErrAddress
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || !o.AllowPrivate && !Public(ip) {
			return ErrAddress
		}
		return nil
	}}
	tr := &http.Transport{
		// No proxy: the address checked must be the document's.
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		TLSClientConfig:        tlsConf,
		TLSHandshakeTimeout:    limits.CIMDTimeout,
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
		now: now, fetching: make(chan struct{}, limits.CIMDMaxFetching), recent: list.New(), byURL: map[string]*list.Element{},
	}
}

// Public reports whether ip is an address on the public internet: not
// loopback, private (RFC 1918, unique local), link-local, carrier-grade
// NAT, multicast or unspecified.
func Public(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsValid() && !ip.IsLoopback() && !ip.IsPrivate() && !ip.IsLinkLocalUnicast() && !ip.IsLinkLocalMulticast() &&
		!ip.IsInterfaceLocalMulticast() && !ip.IsMulticast() && !ip.IsUnspecified() && !cgnat.Contains(ip)
}

// cgnat is RFC 6598's shared address space, which netip does not call
// private.
var cgnat = netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 64, 0, 0}), 10)

// IsClientIDURL reports whether s has the form of a client ID metadata
// document's URL: HTTPS, a host, a path other than "/", no user, no
// fragment, no dot segments.
func IsClientIDURL(s string) bool {
	if len(s) > store.MaxOAuthTextBytes || !namechars.Printable(s, store.MaxOAuthTextBytes) || strings.ContainsAny(s, " \\") {
		return false
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.Hostname() == "" || u.User != nil || u.Fragment != "" ||
		strings.Contains(s, "#") || u.Path == "" || u.Path == "/" || u.Opaque != "" {
		return false
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// ErrBusy is Get's answer while limits.CIMDMaxFetching fetches are under
// way: the client is not refused, only not checked now.
var ErrBusy = errcode.New(errcode.Unavailable, "the relay is fetching as many client metadata documents as it may; try again shortly")

// Get returns the document at clientID, from the cache while it is
// fresh. Errors are InvalidArgument (the client is refused) or ErrBusy.
func (f *Fetcher) Get(ctx context.Context, clientID string) (*Document, error) {
	if !IsClientIDURL(clientID) {
		return nil, errcode.New(errcode.InvalidArgument, "client_id is not an HTTPS URL with a path")
	}
	now := f.now()
	f.mu.Lock()
	if e, ok := f.byURL[clientID]; ok {
		if en := e.Value.(*entry); now.Before(en.expires) {
			f.mu.Unlock()
			return en.doc, nil
		}
		f.recent.Remove(e)
		delete(f.byURL, clientID)
	}
	f.mu.Unlock()
	select {
	case f.fetching <- struct{}{}:
	default:
		return nil, ErrBusy
	}
	doc, ttl, err := f.fetch(ctx, clientID)
	<-f.fetching
	if err != nil {
		return nil, err
	}
	if ttl > 0 {
		f.keep(clientID, doc, now.Add(ttl))
	}
	return doc, nil
}

// keep caches doc, forgetting the oldest entry beyond
// limits.CIMDCacheEntries.
func (f *Fetcher) keep(u string, doc *Document, expires time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.byURL[u]; ok {
		f.recent.Remove(e)
	}
	for f.recent.Len() >= limits.CIMDCacheEntries {
		oldest := f.recent.Back()
		f.recent.Remove(oldest)
		delete(f.byURL, oldest.Value.(*entry).url)
	}
	f.byURL[u] = f.recent.PushFront(&entry{url: u, doc: doc, expires: expires})
}

// cached is how many documents the cache holds.
func (f *Fetcher) cached() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.recent.Len()
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
		switch {
		case d == "no-store" || d == "no-cache":
			return 0
		case strings.HasPrefix(d, "max-age="):
			n, err := strconv.ParseInt(strings.Trim(d[len("max-age="):], `"`), 10, 64)
			if err != nil || n <= 0 {
				return 0
			}
			if n < int64(ttl/time.Second) {
				ttl = time.Duration(n) * time.Second
			}
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
	switch {
	case d.ClientID != clientID:
		return nil, errcode.New(errcode.InvalidArgument, "client metadata document's client_id is not the URL it was fetched from")
	case len(d.RedirectURIs) == 0 || len(d.RedirectURIs) > limits.OAuthMaxRedirectURIs:
		return nil, errcode.New(errcode.InvalidArgument, "client metadata document lists 1 to %d redirect_uris", limits.OAuthMaxRedirectURIs)
	case d.TokenEndpointAuthMethod != "" && d.TokenEndpointAuthMethod != "none":
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
