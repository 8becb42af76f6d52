package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/natstest"
	"github.com/commandcore/commandcore/internal/pgtest"
	"github.com/commandcore/commandcore/internal/relay/relaytest"
)

// roundRobin is a load balancer in front of the replicas: each request
// goes to the next backend in turn, its Host kept, as a balancer with one
// public name does.
type roundRobin struct {
	mu       sync.Mutex
	backends []*url.URL
	next     int
	served   map[string]int
}

func (rr *roundRobin) add(u string) {
	p, err := url.Parse(u)
	if err != nil {
		panic(err)
	}
	rr.mu.Lock()
	rr.backends = append(rr.backends, p)
	rr.mu.Unlock()
}

func (rr *roundRobin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rr.mu.Lock()
	b := rr.backends[rr.next%len(rr.backends)]
	rr.next++
	if rr.served == nil {
		rr.served = map[string]int{}
	}
	rr.served[b.Host]++
	rr.mu.Unlock()
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(b)
		pr.Out.Host = pr.In.Host
	}, FlushInterval: -1}
	proxy.ServeHTTP(w, r)
}

// reached is how many backends served at least one request.
func (rr *roundRobin) reached() int {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return len(rr.served)
}

// TestOAuthThroughTwoReplicas: two relay replicas on one PostgreSQL
// database, joined through NATS, behind one round-robin balancer for
// their main listeners and one for their panels, each given the
// balancers' URLs as --public-url and --panel-public-url. The Go SDK's
// OAuth client registers, is sent to consent, signs in and allows in
// Chromium, exchanges its code and calls the device, every step landing
// on whichever replica the balancer picks; relay token revoke on the
// shared state then ends the connection at both.
func TestOAuthThroughTwoReplicas(t *testing.T) {
	ns := natstest.Start(t)
	pg := pgtest.StartT(t)
	db, err := pg.CreateDatabase("relay")
	if err != nil {
		t.Fatal(err)
	}
	main, panels := &roundRobin{}, &roundRobin{}
	mainLB, panelLB := httptest.NewServer(main), httptest.NewServer(panels)
	t.Cleanup(mainLB.Close)
	t.Cleanup(panelLB.Close)

	e := &relayEnv{t: t, relayState: t.TempDir(), agentState: t.TempDir(), agentConfig: t.TempDir(), database: db}
	var urls []string
	for i := range 2 {
		cmd, u, panelURL, err := relaytest.ServePanelLogged(bin, &syncBuffer{}, "--listen", "127.0.0.1:0", "--state-dir", t.TempDir(),
			"--config-dir", t.TempDir(), "--database", db, "--nats", ns.ClientURL(), "--name", fmt.Sprintf("r%d", i),
			"--public-url", mainLB.URL, "--panel-public-url", panelLB.URL+"/panel/")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
		main.add(u)
		panels.add(strings.TrimSuffix(panelURL, "/panel/"))
		urls = append(urls, u)
	}
	e.url = strings.Join(urls, ",")
	e.enrollAgent("dev1")
	p := &panelEnv{relayEnv: e, b: newBrowser(t, panelLB.URL+"/")}

	consent := newConsentInBrowser(t, p, func() {})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	session := consent.connect(ctx, mainLB.URL+"/mcp/dev1", "e2e cluster client")
	// The agent links to one replica; calls through the other cross NATS.
	deadline := time.Now().Add(20 * time.Second)
	for calls := 0; calls < 4; {
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "process.jobs", Arguments: map[string]any{}})
		switch {
		case err == nil && !res.IsError:
			calls++
		case time.Now().After(deadline):
			t.Fatalf("process.jobs through the balancer: %v %+v", err, res)
		default:
			time.Sleep(100 * time.Millisecond)
		}
	}
	if main.reached() != 2 || panels.reached() != 2 {
		t.Fatalf("the balancers reached %d main listeners and %d panels, want both of each", main.reached(), panels.reached())
	}
	var conn *oauthConnection
	for _, c := range oauthConnections(t, e) {
		if c.Client == "e2e cluster client" {
			conn = &c
		}
	}
	if conn == nil {
		t.Fatal("relay token list shows no connection of the client")
	}
	e.relayCmd("token", "revoke", conn.ID)
	for range 2 {
		if _, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "process.jobs", Arguments: map[string]any{}}); !errors.Is(err, errNoMoreConsent) {
			t.Fatalf("a call after relay token revoke: %v, want the client sent to sign in again", err)
		}
	}
}
