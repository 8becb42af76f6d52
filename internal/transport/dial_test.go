package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/testkit"
)

func TestAgentURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://relay.example.com":       "wss://relay.example.com/v1/agent",
		"https://relay.example.com:8443/": "wss://relay.example.com:8443/v1/agent",
		"wss://relay.example.com/prefix":  "wss://relay.example.com/prefix/v1/agent",
		"HTTPS://relay.example.com":       "wss://relay.example.com/v1/agent",
		"http://127.0.0.1:8080":           "ws://127.0.0.1:8080/v1/agent",
		"http://127.9.9.9":                "ws://127.9.9.9/v1/agent",
		"ws://localhost:1234":             "ws://localhost:1234/v1/agent",
		"http://LOCALHOST":                "ws://LOCALHOST/v1/agent",
		"http://[::1]:9":                  "ws://[::1]:9/v1/agent",
	} {
		got, err := AgentURL(in)
		if err != nil || got != want {
			t.Errorf("AgentURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"ws://relay.example.com", "http://10.0.0.1:80", "http://[::2]", "http://localhost.evil.com",
		"http://127.0.0.1.nip.io", "http://0.0.0.0",
	} {
		if _, err := AgentURL(in); !errors.Is(err, ErrInsecure) {
			t.Errorf("AgentURL(%q): %v, want ErrInsecure", in, err)
		}
	}
	for _, in := range []string{
		"", "relay.example.com", "ftp://relay.example.com", "https://", "https://user:pw@relay.example.com",
		"https://relay.example.com/?x=1", "https://relay.example.com/#f", "mailto:x@y",
	} {
		_, err := AgentURL(in)
		if err == nil {
			t.Errorf("AgentURL(%q) accepted", in)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("error repeats the URL: %v", err)
		}
	}
}

func TestDial(t *testing.T) {
	const token = "tok-secret-123"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != AgentPath {
			http.NotFound(w, r)
			return
		}
		switch r.Header.Get("Authorization") {
		case "Bearer " + token:
		case "Bearer forbidden":
			http.Error(w, "no", http.StatusForbidden)
			return
		case "Bearer busy":
			http.Error(w, "no", http.StatusConflict)
			return
		default:
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","method":"x/hello"}`))
		_, _, _ = ws.ReadMessage()
		_ = ws.Close()
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()

	ws, err := Dial(ctx, srv.URL, token)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	c := Agent(ws, secret, Options{})
	msg, err := c.Read(ctx)
	if err != nil || msg == nil {
		t.Fatalf("Read: %v", err)
	}
	_ = c.Close()

	for bad, want := range map[string]struct {
		err  error
		code string
	}{"wrong": {ErrUnauthorized, "401"}, "forbidden": {ErrDeviceRefused, "403"}, "busy": {ErrBusy, "409"}} {
		_, err = Dial(ctx, srv.URL, bad)
		if !errors.Is(err, want.err) || !strings.Contains(err.Error(), want.code) {
			t.Fatalf("Dial with %s token: %v", bad, err)
		}
		if strings.Contains(err.Error(), bad) {
			t.Fatalf("error repeats the token: %v", err)
		}
	}
	if _, err := Dial(ctx, srv.URL+"/elsewhere", token); err == nil || errors.Is(err, ErrUnauthorized) {
		t.Fatalf("Dial to a 404: %v", err)
	}
	if _, err := Dial(ctx, srv.URL, ""); err == nil {
		t.Fatal("Dial with an empty token succeeded")
	}
	// Refused before any network traffic: the host does not exist.
	if _, err := Dial(ctx, "ws://agent-link-test.invalid", token); !errors.Is(err, ErrInsecure) {
		t.Fatalf("Dial to a non-loopback ws URL: %v", err)
	}
	if _, err := Dial(ctx, "http://192.0.2.1:1", token); !errors.Is(err, ErrInsecure) {
		t.Fatalf("Dial to a non-loopback http URL: %v", err)
	}
}

// TestAccept: Accept gives the server's end of a link, which heartbeats
// the agent under the device secret, whatever Origin the agent's dialer
// sends (agents are not browsers); a request that is not a WebSocket
// handshake gets no link.
func TestAccept(t *testing.T) {
	ends := make(chan *Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := Accept(w, r, secret, Options{HeartbeatInterval: time.Millisecond})
		if err != nil {
			return
		}
		ends <- c
		<-c.Done()
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()

	resp, err := http.Get(srv.URL + AgentPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a plain GET got HTTP %d, want 400", resp.StatusCode)
	}

	h := http.Header{"Origin": {"https://elsewhere.example"}}
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+AgentPath, h)
	if err != nil {
		t.Fatalf("dial with a foreign Origin: %v", err)
	}
	agent := Agent(ws, secret, Options{})
	defer agent.Close()
	server := <-ends
	testkit.Eventually(t, patience, func() error {
		if server.verified.Load() == 0 {
			return errors.New("the accepted end verified no heartbeat")
		}
		return nil
	})
}

func TestParseServers(t *testing.T) {
	for in, want := range map[string]string{
		"https://relay.example":                        "[https://relay.example]",
		" https://a.example/ , https://b.example:8440": "[https://a.example https://b.example:8440]",
		"http://127.0.0.1:8440,http://127.0.0.1:8441":  "[http://127.0.0.1:8440 http://127.0.0.1:8441]",
	} {
		got, err := ParseServers(in)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("ParseServers(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	tooMany := strings.TrimSuffix(strings.Repeat("https://a.example,", limits.MaxServers), ",")
	for in, want := range map[string]string{
		"":                                     "server 1: link: the server URL must be http, https, ws or wss",
		"https://a.example,":                   "server 2: link: the server URL must be http, https, ws or wss",
		"https://a.example,http://b.example":   "server 2: link: plain ws/http is allowed only for a loopback server",
		"https://a.example,https://a.example/": "server 2: named twice",
		tooMany:                                "server 2: named twice",
	} {
		_, err := ParseServers(in)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ParseServers(%q) = %v; want %q", in, err, want)
		}
	}
	var distinct []string
	for i := range limits.MaxServers + 1 {
		distinct = append(distinct, fmt.Sprintf("https://r%d.example", i))
	}
	if _, err := ParseServers(strings.Join(distinct, ",")); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d servers", limits.MaxServers)) {
		t.Errorf("%d servers: %v", limits.MaxServers+1, err)
	}
	if got, err := ParseServers(strings.Join(distinct[:limits.MaxServers], ",")); err != nil || len(got) != limits.MaxServers {
		t.Errorf("%d servers: %v", limits.MaxServers, err)
	}
}
