// Package relay is the reference server of SPEC §7: it enrolls devices,
// accepts their WebSocket links, and serves MCP Streamable HTTP to
// ordinary clients, forwarding each call to the chosen device with a
// freshly minted grant. It never touches jobs: the device does that.
package relay

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/link"
	"github.com/commandcore/commandcore/internal/relaystate"
)

// Server is a running relay.
type Server struct {
	store *relaystate.Store
	key   ed25519.PrivateKey
	// Now is the clock; tests move it.
	Now func() time.Time
	// Link tunes device links; zero values are SPEC §8's bounds.
	Link link.Options
	// SeenEvery is how often a connected device's last-seen time is
	// refreshed; zero means a minute.
	SeenEvery time.Duration
	// Timeouts tunes the HTTP bounds; zero fields are the defaults (http.go).
	Timeouts Timeouts
	// CallTimeout bounds a forwarded call; zero means limits.ForwardTimeout.
	CallTimeout time.Duration

	gates gates

	mu    sync.Mutex
	links map[string]*deviceLink // by device ID

	// progress maps the progress token the relay gave a forwarded call to
	// the client session and token it must reach.
	progress sync.Map
}

// deviceLink is one connected device.
type deviceLink struct {
	conn    *link.Conn
	session *mcp.ClientSession
}

// New returns a relay over store.
func New(store *relaystate.Store) (*Server, error) {
	key, err := store.GrantKey()
	if err != nil {
		return nil, err
	}
	// Links do not survive the relay: whatever the last run recorded as
	// connected is not.
	if err := store.DisconnectAll(); err != nil {
		return nil, err
	}
	return &Server{store: store, key: key, Now: time.Now, links: map[string]*deviceLink{}, gates: newGates()}, nil
}

// Handler serves the relay's HTTP surface, with the bounds of http.go.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/enroll", s.limitEnroll(http.HandlerFunc(s.enroll)))
	mux.HandleFunc("GET /v1/agent", s.agent)
	h := s.mcpHandler()
	mux.Handle("/mcp", h)
	mux.Handle("/mcp/{device}", h)
	return s.bounded(mux)
}

// Close ends every device link.
func (s *Server) Close() {
	s.mu.Lock()
	links := make([]*deviceLink, 0, len(s.links))
	for _, l := range s.links {
		links = append(links, l)
	}
	s.mu.Unlock()
	for _, l := range links {
		l.conn.Close()
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
