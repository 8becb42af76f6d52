package relay

import (
	"container/list"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/commandcore/commandcore/internal/errcode"
)

// Requests without a credential are rate-limited per surface (README): each
// kind has its own budget per source address and its own ceiling over all
// sources, so anonymous traffic at one surface (client registrations,
// say) never locks people out of another (the panel's sign-in) or devices
// out of enrollment. A source is an IPv4 address or an IPv6 /64; behind a
// proxy, the address the proxy forwarded for, when relay serve
// --trusted-proxies names the proxy.
type surface int

const (
	surfaceEnroll surface = iota
	surfaceRegister
	surfaceSignIn
	surfaceAuthorize
	surfaces
)

// budget is a surface's rate: a burst per source, then one per every; and
// over all sources a burst, then allBurst per allEvery.
type budget struct {
	burst    int
	every    time.Duration
	allBurst int
	allEvery time.Duration
	// what names the requests in the refusal.
	what string
}

var budgets = [surfaces]budget{
	surfaceEnroll:    {burst: enrollBurst, every: enrollEvery, allBurst: 100, allEvery: 100 * time.Millisecond, what: "enrollment requests"},
	surfaceRegister:  {burst: enrollBurst, every: enrollEvery, allBurst: 50, allEvery: time.Second, what: "client registrations"},
	surfaceSignIn:    {burst: enrollBurst, every: enrollEvery, allBurst: 100, allEvery: 100 * time.Millisecond, what: "sign-in attempts"},
	surfaceAuthorize: {burst: 30, every: time.Second, allBurst: 300, allEvery: 20 * time.Millisecond, what: "authorization requests"},
}

const (
	enrollBurst = 10
	enrollEvery = 6 * time.Second
	// maxEnrollSources bounds each surface's per-address table. When it is
	// full, the address seen least recently is forgotten (and starts
	// afresh if it comes back), so memory stays bounded whatever the
	// traffic; the ceiling over all sources bounds what many addresses
	// get together.
	maxEnrollSources = 4096
)

// surfaceLimit is one surface's limiters.
type surfaceLimit struct {
	budget
	per *sourceLimiter
	all *rate.Limiter
}

func newSurfaceLimits() [surfaces]*surfaceLimit {
	var out [surfaces]*surfaceLimit
	for i, b := range budgets {
		out[i] = &surfaceLimit{budget: b, per: newSourceLimiter(b.burst, b.every, maxEnrollSources), all: rate.NewLimiter(rate.Every(b.allEvery), b.allBurst)}
	}
	return out
}

// sourceLimiter is a token bucket per source address, least recently
// seen first out.
type sourceLimiter struct {
	limit rate.Limit
	burst int
	max   int

	mu     sync.Mutex
	recent *list.List // of *source, most recently seen first
	byKey  map[string]*list.Element
}

type source struct {
	key string
	lim *rate.Limiter
}

func newSourceLimiter(burst int, every time.Duration, max int) *sourceLimiter {
	return &sourceLimiter{limit: rate.Every(every), burst: burst, max: max, recent: list.New(), byKey: map[string]*list.Element{}}
}

// allow spends one of key's tokens at now, or reports that none is left.
func (l *sourceLimiter) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.byKey[key]
	if ok {
		l.recent.MoveToFront(e)
	} else {
		if l.recent.Len() >= l.max {
			oldest := l.recent.Back()
			l.recent.Remove(oldest)
			delete(l.byKey, oldest.Value.(*source).key)
		}
		e = l.recent.PushFront(&source{key: key, lim: rate.NewLimiter(l.limit, l.burst)})
		l.byKey[key] = e
	}
	return e.Value.(*source).lim.AllowN(now, 1)
}

// sourceKey is the address a request's rate is counted against: its IPv4
// address, or its IPv6 /64 (one host usually holds a whole /64). Anything
// else counts as one unknown source.
func sourceKey(remoteAddr string) string {
	addr, ok := peerAddr(remoteAddr)
	if !ok {
		return ""
	}
	return addrKey(addr)
}

// peerAddr is a connection's peer address, without zone and unmapped.
func peerAddr(remoteAddr string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return addr.WithZone("").Unmap(), true
}

func addrKey(addr netip.Addr) string {
	if addr.Is4() {
		return addr.String()
	}
	p, err := addr.Prefix(64)
	if err != nil {
		return ""
	}
	return p.String()
}

// ErrTrustedProxy refuses a trusted proxy that is not an address or CIDR.
var ErrTrustedProxy = errors.New("a trusted proxy is an IP address or a CIDR prefix")

// SetTrustedProxies makes the relay read a request's client address from
// its Forwarded or X-Forwarded-For header when the request comes from one
// of these addresses or prefixes (and only then: anyone can send the
// headers). Call it before serving.
func (s *Server) SetTrustedProxies(cidrs []string) error {
	var out []netip.Prefix
	for _, c := range cidrs {
		if !strings.Contains(c, "/") {
			a, err := netip.ParseAddr(c)
			if err != nil {
				return ErrTrustedProxy
			}
			c = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()).String()
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return ErrTrustedProxy
		}
		out = append(out, p.Masked())
	}
	s.trusted = out
	return nil
}

func (s *Server) isTrusted(a netip.Addr) bool {
	for _, p := range s.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientSource is the source key of the client a request comes from: the
// connection's peer, or, when the peer is a trusted proxy, the nearest
// address before it in the forwarding chain that is not one of the
// trusted proxies (the rightmost such in X-Forwarded-For, else in
// Forwarded's for=). A header that names none leaves the peer.
func (s *Server) clientSource(r *http.Request) string {
	peer, ok := peerAddr(r.RemoteAddr)
	if !ok {
		return ""
	}
	if !s.isTrusted(peer) {
		return addrKey(peer)
	}
	chain := forwardedFor(r.Header)
	for i := len(chain) - 1; i >= 0; i-- {
		if !s.isTrusted(chain[i]) {
			return addrKey(chain[i])
		}
	}
	return addrKey(peer)
}

// forwardedFor is the chain of client addresses a request's
// X-Forwarded-For names, or else its Forwarded header's for= (RFC 7239),
// first hop first; entries that are no address (obfuscated, unknown) are
// left out.
func forwardedFor(h http.Header) []netip.Addr {
	var out []netip.Addr
	if xff := h.Values("X-Forwarded-For"); len(xff) > 0 {
		for _, v := range strings.Split(strings.Join(xff, ","), ",") {
			if a, ok := parseNode(strings.TrimSpace(v)); ok {
				out = append(out, a)
			}
		}
		return out
	}
	for _, v := range h.Values("Forwarded") {
		for _, elem := range strings.Split(v, ",") {
			for _, pair := range strings.Split(elem, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if !ok || !strings.EqualFold(k, "for") {
					continue
				}
				if a, ok := parseNode(strings.Trim(val, `"`)); ok {
					out = append(out, a)
				}
			}
		}
	}
	return out
}

// parseNode reads a node as forwarding headers write it: an address, an
// IPv6 address in brackets, either with a port.
func parseNode(v string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(v); err == nil {
		return ap.Addr().WithZone("").Unmap(), true
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")); err == nil {
		return a.WithZone("").Unmap(), true
	}
	return netip.Addr{}, false
}

// limit bounds a surface's requests: per source (429 beyond its rate) and
// over all sources (503 beyond the ceiling); enrollments also in number
// at once (503 beyond MaxEnrolling).
func (s *Server) limit(sf surface) func(http.Handler) http.Handler {
	l := s.gates.limits[sf]
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			now := s.Now()
			if !l.per.allow(s.clientSource(r), now) {
				w.Header().Set("Retry-After", strconv.Itoa(int(l.every/time.Second)+1))
				refuse(w, http.StatusTooManyRequests, errcode.New(errcode.RateLimited, "too many %s from this address; try again later", l.what))
				return
			}
			if !l.all.AllowN(now, 1) {
				w.Header().Set("Retry-After", "1")
				refuse(w, http.StatusServiceUnavailable, errBusy)
				return
			}
			if sf == surfaceEnroll {
				select {
				case s.gates.enrolling <- struct{}{}:
					defer func() { <-s.gates.enrolling }()
				default:
					refuse(w, http.StatusServiceUnavailable, errBusy)
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}
