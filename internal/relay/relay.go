// Package relay is the reference server (README): it enrolls devices,
// accepts their WebSocket links, and serves MCP Streamable HTTP to
// ordinary clients, forwarding each call to the chosen device with a
// freshly minted grant. It never touches jobs: the device does that.
//
// Device credentials rotate on every link and a device has one link at a
// time; rotate.go and standing.go describe how, and their crash windows.
package relay

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"github.com/commandcore/commandcore/internal/authz"
	"log"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/commandcore/commandcore/internal/enrollment"
	"github.com/commandcore/commandcore/internal/relay/downloads"
	"github.com/commandcore/commandcore/internal/relay/oauth"
	"github.com/commandcore/commandcore/internal/relay/signin"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/relay/updates"
	"github.com/commandcore/commandcore/internal/transport"
)

// Server is a running relay.
type Server struct {
	store  store.State
	tokens *tokenCache
	key    ed25519.PrivateKey
	// minter numbers this process's grants for agents that take them.
	minter *authz.Minter
	// Now is the clock; tests move it.
	Now func() time.Time
	// Link tunes device links; zero values are docs/limits.md's bounds.
	Link transport.Options
	// SeenEvery is how often a connected device's last-seen time is
	// refreshed; zero means a minute.
	SeenEvery time.Duration
	// RotateWait is how long an agent has to confirm the token its link
	// hands it before the link is closed; zero means limits.SendTimeout.
	RotateWait time.Duration
	// Log receives one content-free line per event about a device (its
	// link up and down, a copy of its credentials found, a link ended for
	// its standing) and per call (tool, device, outcome, code, duration);
	// nil discards them.
	Log *log.Logger
	// Timeouts tunes the HTTP bounds; zero fields are the defaults (http.go).
	Timeouts Timeouts
	// CallTimeout bounds a forwarded call; zero means limits.ForwardTimeout.
	CallTimeout time.Duration
	// MaxCallWait bounds how long one call may block (callwait.go); zero
	// means limits.RelayCallWait.
	MaxCallWait time.Duration
	// Router carries forwarded calls to their devices; nil means through
	// the links this process holds.
	Router Router
	// SignIn offers the panel's sign-ins besides a code (SSO, passkeys);
	// nil offers codes only.
	SignIn *signin.SignIn

	gates gates

	mu    sync.Mutex
	links map[string]*deviceLink // by device ID, once serving
	// watchOnce starts watchLinks with the first link; stopWatch ends it.
	watchOnce, stopOnce sync.Once
	stopWatch           chan struct{}
	// held is every device's link from its upgrade to its end, and
	// admissions the devices being admitted (standing.go).
	held       map[string]*transport.Conn
	admissions map[string]chan struct{}
	// holds counts the links ever taken into held, so the link watcher
	// knows when it holds one it has not checked (watch.go).
	holds     uint64
	rotations rotations

	// Observer, when set before serving, is told of calls, link ends and
	// enrollment refusals (metrics).
	Observer Observer
	// Downloads, when set before serving, serves install.sh and the
	// agent's binaries without a token (package downloads).
	Downloads http.Handler
	// Updates, when set before serving, is what the relay offers agents
	// of other versions (package updates); nil offers nothing.
	Updates *updates.Catalog
	audit   *auditLog

	// replica is this relay among those serving from its state, peers how
	// it reaches the others (replica.go).
	replica store.Replica
	peers   Peers
	// oauth is the authorization server, once SetOAuth has run.
	oauth atomic.Pointer[oauth.Server]
	// origins are the web origins allowed to call the MCP endpoints.
	origins origins
	// trusted are the proxies whose forwarding headers name the client
	// (SetTrustedProxies).
	trusted []netip.Prefix
	// crossSent and crossServed count the calls routed to and served for
	// other replicas.
	crossSent, crossServed atomic.Uint64
	holders                holderCache
}

// New returns a relay over store that runs alone: the one replica.
func New(store store.State) (*Server, error) {
	return NewReplica(store, ReplicaConfig{})
}

// NewReplica returns a relay over store that joins the replicas serving
// from it as cfg says; Close leaves.
func NewReplica(store store.State, cfg ReplicaConfig) (*Server, error) {
	key, err := store.GrantKey()
	if err != nil {
		return nil, err
	}
	minter, err := authz.NewMinter()
	if err != nil {
		return nil, err
	}
	audit, err := openAudit(store)
	if err != nil {
		return nil, err
	}
	s := &Server{store: store, tokens: newTokenCache(store), key: key, minter: minter, Now: time.Now, links: map[string]*deviceLink{}, audit: audit,
		held: map[string]*transport.Conn{}, admissions: map[string]chan struct{}{}, gates: newGates(), stopWatch: make(chan struct{}),
		replica: newReplica(cfg), peers: cfg.Peers}
	// Answering before joining: a replica that learns of this one from
	// the state can reach it at once.
	if s.peers != nil {
		if err := s.peers.Serve(s.replica.ID, s); err != nil {
			return nil, err
		}
	}
	if err := s.join(); err != nil {
		if s.peers != nil {
			s.peers.Close()
		}
		return nil, err
	}
	go s.beat()
	return s, nil
}

// Handler serves the relay's HTTP surface, with the bounds of http.go.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// Refusals are counted whoever refuses: the rate limit or the code.
	mux.HandleFunc("POST "+enrollment.EnrollPath, s.countRefusals(s.limit(surfaceEnroll)(http.HandlerFunc(s.enroll)).ServeHTTP))
	mux.HandleFunc("POST "+enrollment.LeavePath, s.countRefusals(s.limit(surfaceEnroll)(http.HandlerFunc(s.leave)).ServeHTTP))
	mux.HandleFunc("GET "+transport.AgentPath, s.agent)
	h := s.mcpHandler()
	// As typed, with a trailing '/', the same endpoints.
	for _, p := range []string{"/mcp", "/mcp/{$}", "/mcp/{device}", "/mcp/{device}/{$}"} {
		mux.Handle(p, h)
	}
	mux.HandleFunc("/.well-known/", s.oauthEndpoints)
	for _, p := range oauth.EndpointPaths() {
		mux.HandleFunc(p, s.oauthEndpoints)
	}
	if s.Downloads != nil {
		d := s.admitDownload(s.Downloads)
		mux.Handle("GET "+downloads.ScriptPath, d)
		mux.Handle("GET "+downloads.FilePrefix+"{name}", d)
	}
	return s.bounded(mux)
}

// Close ends every device link and writes the audit entries of the calls
// that ended. Calls that end later are still recorded.
func (s *Server) Close() {
	s.stopOnce.Do(func() { close(s.stopWatch) })
	s.mu.Lock()
	links := make([]*transport.Conn, 0, len(s.held))
	for _, c := range s.held {
		links = append(links, c)
	}
	s.mu.Unlock()
	for _, c := range links {
		c.Close()
	}
	s.audit.flush()
	// Its links are released with it: other replicas take them at once.
	s.store.LeaveReplica(s.replica.ID)
	if s.peers != nil {
		s.peers.Close()
	}
}

// connected returns the device's live link, or nil.
func (s *Server) connected(id string) *deviceLink {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.links[id]
}

func randomID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
