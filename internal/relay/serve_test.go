package relay

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/relay/announce"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// TestServeRefusesABadConfigurationBeforeServing: each refusal comes
// before anything is announced or listened on.
func TestServeRefusesABadConfigurationBeforeServing(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, c := range []struct {
		cfg  ServeConfig
		want error
	}{
		{ServeConfig{TLSCert: "cert.pem"}, ErrTLSPair},
		{ServeConfig{TLSKey: "key.pem"}, ErrTLSPair},
		{ServeConfig{MetricsToken: strings.Repeat("t", 32)}, ErrMetricsTokenAlone},
		{ServeConfig{MetricsListen: "127.0.0.1:0", MetricsToken: strings.Repeat("t", 15)}, ErrMetricsTokenShort},
		{ServeConfig{MetricsListen: "0.0.0.0:0"}, ErrMetricsNeedToken},
		{ServeConfig{PanelListen: "0.0.0.0:0"}, ErrPanelPlainHTTP},
		{ServeConfig{PanelListen: "0.0.0.0:0", MetricsListen: "127.0.0.1:0"}, ErrPanelPlainHTTP},
	} {
		var out strings.Builder
		c.cfg.State, c.cfg.Listen, c.cfg.Out = st, "127.0.0.1:0", &out
		if err := Serve(context.Background(), c.cfg); !errors.Is(err, c.want) {
			t.Errorf("%+v: %v, want %v", c.cfg, err, c.want)
		}
		if out.Len() != 0 {
			t.Errorf("%+v: announced %q before refusing", c.cfg, out.String())
		}
	}
}

// TestServeAnnouncesServesAndStops: Serve announces its endpoints and its
// metrics, serves both (the metrics with the token only), and returns
// when its context ends.
func TestServeAnnouncesServesAndStops(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	token := strings.Repeat("m", 16)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServeConfig{State: st, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", MetricsToken: token, Out: w})
		w.Close()
	}()
	lines := bufio.NewScanner(r)
	var urls []string
	for _, prefix := range []string{announce.Listening, announce.Metrics, "relay: MCP endpoints "} {
		if !lines.Scan() || !strings.HasPrefix(lines.Text(), prefix) {
			t.Fatalf("announcement %q, want %q first", lines.Text(), prefix)
		}
		urls = append(urls, strings.Fields(strings.TrimPrefix(lines.Text(), prefix))[0])
	}
	go io.Copy(io.Discard, r)
	if res, err := http.Get(urls[0] + "/mcp"); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /mcp without a token: %v %v", res, err)
	}
	req, _ := http.NewRequest("GET", urls[1], nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("a scrape with the token: %v %v", res, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve returned %v", err)
		}
	case <-time.After(2 * shutdownGrace):
		t.Fatal("Serve did not return after its context ended")
	}
	if _, err := net.Dial("tcp", strings.TrimPrefix(urls[0], "http://")); err == nil {
		t.Error("the relay still listens after Serve returned")
	}
}

// TestServePanelOffLoopbackInClearWhenTold: with PanelInsecure the panel
// serves plain HTTP on an address that is not loopback (the refusal
// without it is in TestServeRefusesABadConfigurationBeforeServing).
func TestServePanelOffLoopbackInClearWhenTold(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServeConfig{State: st, Listen: "127.0.0.1:0", PanelListen: "0.0.0.0:0", PanelInsecure: true, Out: w, Warn: io.Discard})
		w.Close()
	}()
	lines := bufio.NewScanner(r)
	var panelURL string
	for panelURL == "" && lines.Scan() {
		if u, ok := strings.CutPrefix(lines.Text(), announce.Panel); ok {
			panelURL = u
		}
	}
	go io.Copy(io.Discard, r)
	_, port, _ := net.SplitHostPort(strings.TrimSuffix(strings.TrimPrefix(panelURL, "http://"), "/panel/"))
	if res, err := http.Get("http://127.0.0.1:" + port + "/panel/login"); err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("the panel on %s: %v %v", panelURL, res, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v", err)
	}
}
