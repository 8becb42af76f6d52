package relay

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// The HTTP server's bounds (README). Long requests are the
// relay's point (long polls of 30 s, process.run and process.wait for
// minutes with progress, SSE responses, the device WebSocket), so there is
// no blanket read or write timeout: the server bounds header and idle
// time, and each request gets deadlines for what it is.
const (
	// HeaderTimeout bounds reading a request's headers, and a TLS handshake.
	HeaderTimeout = 10 * time.Second
	// IdleTimeout bounds a keep-alive connection between requests.
	IdleTimeout = time.Minute
	// UnauthenticatedTimeout bounds reading what follows the headers of a
	// request that has not presented a valid credential: an enrollment's
	// body, or the body after a refusal.
	UnauthenticatedTimeout = 10 * time.Second
	// BodyTimeout bounds reading an authenticated request's body.
	BodyTimeout = time.Minute
	// WriteTimeout bounds each write of a response: a client that stops
	// reading is cut off, while a response that keeps flowing lives on.
	WriteTimeout = limits.SendTimeout
	// MaxUnauthenticated bounds requests in progress that have not yet
	// presented a valid client token or device credential; beyond it the
	// relay answers 503 at once.
	MaxUnauthenticated = 64
	// MaxEnrolling bounds enrollment requests in progress. It is below
	// MaxUnauthenticated, so slow enrollments cannot keep other clients
	// from presenting their credentials.
	MaxEnrolling = 16
)

// Timeouts tunes the HTTP bounds; a zero field is the constant above.
type Timeouts struct {
	Header, Idle, Unauthenticated, Body, Write time.Duration
}

func (t Timeouts) withDefaults() Timeouts {
	pick := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	return Timeouts{
		Header: pick(t.Header, HeaderTimeout), Idle: pick(t.Idle, IdleTimeout),
		Unauthenticated: pick(t.Unauthenticated, UnauthenticatedTimeout),
		Body:            pick(t.Body, BodyTimeout), Write: pick(t.Write, WriteTimeout),
	}
}

// HTTPServer returns the HTTP server for the relay's handler, with its
// header and idle bounds; the handler sets the rest per request.
func (s *Server) HTTPServer() *http.Server {
	t := s.Timeouts.withDefaults()
	return &http.Server{Handler: s.Handler(), ReadHeaderTimeout: t.Header, IdleTimeout: t.Idle}
}

// gates holds the bounds on requests without a credential.
type gates struct {
	unauthenticated chan struct{}
	enrolling       chan struct{}
	downloading     chan struct{}
	limits          [surfaces]*surfaceLimit
}

func newGates() gates {
	return gates{
		unauthenticated: make(chan struct{}, MaxUnauthenticated),
		enrolling:       make(chan struct{}, MaxEnrolling),
		downloading:     make(chan struct{}, limits.DownloadsConcurrent),
		limits:          newSurfaceLimits(),
	}
}

var (
	errBusy = errcode.New(errcode.Unavailable, "the relay is busy; try again shortly")
)

// refuse answers a request that is not served, and closes its connection
// at once rather than waiting for the rest of a body nobody reads.
func refuse(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Connection", "close")
	writeError(w, status, err)
}

// pendingKey carries a request's *pending in its context.
type pendingKey struct{}

// pending is a request that has not presented a credential yet: it holds
// a slot of gates.unauthenticated until it does or until it ends.
type pending struct {
	once    sync.Once
	release func()
}

func (p *pending) done() { p.once.Do(p.release) }

// bounded is the outermost handler: it gives every request the deadlines
// of an unauthenticated one and a slot among MaxUnauthenticated.
func (s *Server) bounded(next http.Handler) http.Handler {
	t := s.Timeouts.withDefaults()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Deadlines work on every connection net/http serves; only test
		// recorders lack them, so their errors are not checked here.
		rc := http.NewResponseController(w)
		rc.SetReadDeadline(time.Now().Add(t.Unauthenticated))
		rc.SetWriteDeadline(time.Now().Add(t.Write))
		// What net/http writes after the handler (the rest of a buffered
		// response) gets one more write's time.
		defer func() { rc.SetWriteDeadline(time.Now().Add(t.Write)) }()
		select {
		case s.gates.unauthenticated <- struct{}{}:
		default:
			refuse(w, http.StatusServiceUnavailable, errBusy)
			return
		}
		p := &pending{release: func() { <-s.gates.unauthenticated }}
		defer p.done()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), pendingKey{}, p)))
	})
}

// authenticated records that r presented a valid credential: it no longer
// counts against MaxUnauthenticated.
func authenticated(r *http.Request) {
	if p, ok := r.Context().Value(pendingKey{}).(*pending); ok {
		p.done()
	}
}

// admitClient is authenticated for a client's MCP request: its body may
// take BodyTimeout, after which nothing limits how long the request reads
// (net/http lifts the read deadline once the body is read, and then reads
// only to notice the client leaving), and its response is bounded per
// write rather than as a whole.
func (s *Server) admitClient(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	authenticated(r)
	t := s.Timeouts.withDefaults()
	rc := http.NewResponseController(w)
	if r.Body == nil || r.Body == http.NoBody {
		// That read began before the handler, under the deadline bounded
		// set; left there, it would cancel a long request.
		rc.SetReadDeadline(time.Time{})
	} else {
		rc.SetReadDeadline(time.Now().Add(t.Body))
	}
	return &writeBounded{ResponseWriter: w, rc: rc, timeout: t.Write}
}

// admitDownload serves a download, which presents no credential, as a
// slot among limits.DownloadsConcurrent instead of one among
// MaxUnauthenticated: a binary takes long on a slow link, and slow
// downloads must not keep clients from presenting their credentials.
// Each write has its own deadline, as a client's response's.
func (s *Server) admitDownload(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case s.gates.downloading <- struct{}{}:
		default:
			refuse(w, http.StatusServiceUnavailable, errBusy)
			return
		}
		defer func() { <-s.gates.downloading }()
		next.ServeHTTP(s.admitClient(w, r), r)
	})
}

// writeBounded gives each write and flush of a response its own deadline.
type writeBounded struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *writeBounded) Write(p []byte) (int, error) {
	w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.ResponseWriter.Write(p)
}

// FlushError is what http.ResponseController.Flush calls.
func (w *writeBounded) FlushError() error {
	w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.rc.Flush()
}

// Flush serves callers that assert http.Flusher.
func (w *writeBounded) Flush() { w.FlushError() }

// Unwrap lets http.ResponseController reach the connection.
func (w *writeBounded) Unwrap() http.ResponseWriter { return w.ResponseWriter }
