package relay

import (
	"container/list"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Enrollment is rate-limited per source address (README): a burst of
// enrollBurst requests, then one per enrollEvery. The relay trusts no
// forwarding header, so behind a proxy every request shares one address.
const (
	enrollBurst = 10
	enrollEvery = 6 * time.Second
	// maxEnrollSources bounds the per-address table. When it is full, the
	// address seen least recently is forgotten (and starts afresh if it
	// comes back), so memory stays bounded whatever the traffic.
	maxEnrollSources = 4096
)

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
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return ""
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return ""
	}
	addr = addr.Unmap()
	if addr.Is4() {
		return addr.String()
	}
	p, err := addr.WithZone("").Prefix(64)
	if err != nil {
		return ""
	}
	return p.String()
}

// limitEnroll bounds enrollment: per source address (429 beyond the rate)
// and in number at once (503 beyond MaxEnrolling).
func (s *Server) limitEnroll(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.gates.sources.allow(sourceKey(r.RemoteAddr), s.Now()) {
			w.Header().Set("Retry-After", strconv.Itoa(int(enrollEvery/time.Second)))
			refuse(w, http.StatusTooManyRequests, errRateLimited)
			return
		}
		select {
		case s.gates.enrolling <- struct{}{}:
			defer func() { <-s.gates.enrolling }()
		default:
			refuse(w, http.StatusServiceUnavailable, errBusy)
			return
		}
		next.ServeHTTP(w, r)
	})
}
