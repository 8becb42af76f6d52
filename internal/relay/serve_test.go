package relay

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/relay/announce"
	"github.com/commandcore/commandcore/internal/relay/oauth"
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
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
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
		{ServeConfig{PanelPublicURL: "https://relay.example/panel/"}, ErrOAuthNeedsPanel},
		{ServeConfig{OAuthPrivateClients: true}, ErrOAuthNeedsPanel},
		{ServeConfig{OAuthClientCA: "ca.pem"}, ErrOAuthNeedsPanel},
		{ServeConfig{PanelListen: "127.0.0.1:0", PublicURL: "https://relay.example/relay"}, oauth.ErrPublicURL},
		{ServeConfig{PanelListen: "127.0.0.1:0", PanelPublicURL: "ftp://relay.example/panel/"}, oauth.ErrPanelURL},
		{ServeConfig{PanelListen: "127.0.0.1:0", OAuthClientCA: notPEM}, ErrClientCA},
		{ServeConfig{AllowedOrigins: []string{"http://localhost:6274", "localhost:6274"}}, ErrAllowedOrigin},
		{ServeConfig{MaxCallWait: 999 * time.Millisecond}, ErrMaxCallWait},
		{ServeConfig{TrustedProxies: []string{"10.0.0.0/8", "proxy.example"}}, ErrTrustedProxy},
		{ServeConfig{MaxCallWait: 11*time.Minute + time.Nanosecond}, ErrMaxCallWait},
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
// without it is in TestServeRefusesABadConfigurationBeforeServing); a
// start without a public URL clears the one an earlier start recorded.
func TestServePanelOffLoopbackInClearWhenTold(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A public URL an earlier start recorded: this one has none.
	if err := st.SetPublicURL("https://old.example"); err != nil {
		t.Fatal(err)
	}
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
	if u, err := st.PublicURL(); err != nil || u != "" {
		t.Errorf("a start without a public URL left %q recorded (%v)", u, err)
	}
	_, port, _ := net.SplitHostPort(strings.TrimSuffix(strings.TrimPrefix(panelURL, "http://"), "/panel/"))
	if res, err := http.Get("http://127.0.0.1:" + port + "/panel/login"); err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("the panel on %s: %v %v", panelURL, res, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v", err)
	}
}

// TestServeOAuthWithThePanel: with the panel, the relay serves OAuth under
// its public URL, and sends browsers to the panel's consent page.
func TestServeOAuthWithThePanel(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServeConfig{State: st, Listen: "127.0.0.1:0", PanelListen: "127.0.0.1:0", PublicURL: "https://relay.example/", Out: w,
			AllowedOrigins: []string{"http://localhost:6274"}})
		w.Close()
	}()
	lines := bufio.NewScanner(r)
	var base, panelURL string
	for (base == "" || panelURL == "") && lines.Scan() {
		if u, ok := strings.CutPrefix(lines.Text(), announce.Listening); ok {
			base = u
		}
		if u, ok := strings.CutPrefix(lines.Text(), announce.Panel); ok {
			panelURL = u
		}
	}
	go io.Copy(io.Discard, r)
	// Recorded for the administration commands' install lines.
	if u, err := st.PublicURL(); err != nil || u != "https://relay.example" {
		t.Errorf("the public URL recorded: %q, %v", u, err)
	}
	res, err := http.Get(base + "/mcp/dev")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := res.Header.Get("WWW-Authenticate"); got != `Bearer resource_metadata="https://relay.example/.well-known/oauth-protected-resource/mcp/dev", scope="read run write all offline_access"` {
		t.Errorf("401's challenge: %q", got)
	}
	// The public URL's origin and the allowed one reach authentication;
	// another origin is refused first.
	for origin, want := range map[string]int{"https://relay.example": 401, "http://localhost:6274": 401, "http://localhost:6275": 403} {
		req, _ := http.NewRequest(http.MethodPost, base+"/mcp/dev", strings.NewReader("{}"))
		req.Header.Set("Origin", origin)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("Origin %s: %d, want %d", origin, res.StatusCode, want)
		}
	}
	res, err = http.Get(base + oauth.ServerMetadataPath)
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Issuer string }
	json.NewDecoder(res.Body).Decode(&meta)
	res.Body.Close()
	if meta.Issuer != "https://relay.example" {
		t.Errorf("issuer: %q", meta.Issuer)
	}
	c, err := st.RegisterClient(store.OAuthClient{RedirectURIs: []string{"http://127.0.0.1:9/cb"}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values{"client_id": {c.ID}, "redirect_uri": {"http://127.0.0.1:9/cb"}, "response_type": {"code"}, "code_challenge_method": {"S256"},
		"code_challenge": {"bwYWJ3EcQwUBuySHnFSM-XTBoFvkpGjyV8X68fEiS3A"}, "resource": {"https://relay.example/mcp"}}
	res, err = noRedirects.Get(base + oauth.AuthorizePath + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusFound || !strings.HasPrefix(loc, panelURL+"consent/car_") {
		t.Errorf("authorize: %d %q, want the consent page under %s", res.StatusCode, loc, panelURL)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v", err)
	}
}

// TestPanelCookiesSecureBehindATLSProxy: a panel whose listener is plain
// HTTP but whose public URL is https (a TLS proxy in front, the common
// deployment) marks its cookies Secure; one served in clear on loopback
// with no public URL does not.
func TestPanelCookiesSecureBehindATLSProxy(t *testing.T) {
	for public, want := range map[string]bool{"https://relay.example/panel/": true, "": false} {
		st, err := store.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r, w := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- Serve(ctx, ServeConfig{State: st, Listen: "127.0.0.1:0", PanelListen: "127.0.0.1:0", PanelPublicURL: public, Out: w})
			w.Close()
		}()
		lines := bufio.NewScanner(r)
		panelURL := ""
		for panelURL == "" && lines.Scan() {
			if u, ok := strings.CutPrefix(lines.Text(), announce.Panel); ok {
				panelURL = u
			}
		}
		go io.Copy(io.Discard, r)
		code, err := st.CreateSignIn("olga", time.Minute, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, panelURL+"login", strings.NewReader(url.Values{"code": {code}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		res, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		cookies := res.Cookies()
		if len(cookies) == 0 {
			t.Fatalf("panel public URL %q: sign-in answered %d without a cookie", public, res.StatusCode)
		}
		for _, c := range cookies {
			if c.Secure != want {
				t.Errorf("panel public URL %q: cookie %s Secure = %v", public, c.Name, c.Secure)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Serve returned %v", err)
		}
		st.Close()
	}
}
