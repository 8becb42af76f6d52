package e2e

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/relay/signin"
	"github.com/commandcore/commandcore/internal/relay/signin/oidctest"
)

// TestSSOSignsInToConsent: the real relay with the team's OpenID provider
// (a real one, started by the test) and the panel behind one public
// address. A chat client's OAuth request reaches a browser that is signed
// out; the sign-in page offers SSO; the person signs in at the provider,
// comes back to the consent page, allows, and the client calls the
// device. The person is the admin their address names, and the sign-in
// is audited.
func TestSSOSignsInToConsent(t *testing.T) {
	panels := &roundRobin{}
	panelLB := httptest.NewServer(panels)
	t.Cleanup(panelLB.Close)
	issuer := oidctest.Start(t, oidctest.Client{ID: "relay", Secret: "relay-secret", RedirectURI: panelLB.URL + signin.CallbackPath})
	secretFile := filepath.Join(t.TempDir(), "oidc-secret")
	if err := os.WriteFile(secretFile, []byte("relay-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &relayEnv{t: t, relayState: t.TempDir(), agentState: t.TempDir(), agentConfig: t.TempDir()}
	cmd, u, panelURL, err := relaytest.ServePanelLogged(bin, &syncBuffer{}, "--listen", "127.0.0.1:0", "--state-dir", e.relayState,
		"--config-dir", t.TempDir(), "--panel-public-url", panelLB.URL+"/panel/",
		"--oidc-issuer", issuer, "--oidc-client-id", "relay", "--oidc-client-secret-file", secretFile, "--oidc-allow", oidctest.Allowed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	panels.add(strings.TrimSuffix(panelURL, "/panel/"))
	e.relay, e.url = cmd, u
	e.enrollAgent("dev1")
	p := &panelEnv{relayEnv: e, panel: panelLB.URL + "/panel/", b: newBrowser(t, panelLB.URL+"/")}

	consent := newConsentInBrowser(t, p, func() {})
	consent.signIn = func() {
		if got := p.b.text("#signin-sso"); got != "Sign in with SSO" {
			t.Fatalf("the sign-in page offers %q, not SSO", got)
		}
		p.b.submit("#signin-sso")
		if got := eval[string](p.b, "location.origin"); got != issuer {
			t.Fatalf("SSO sent the browser to %s, not the provider %s", got, issuer)
		}
		eval[bool](p.b, `document.querySelector('#username').value = '`+oidctest.Username(issuer)+`',
			document.querySelector('#password').value = '`+oidctest.Password+`', true`)
		p.b.submit("button[type=submit]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	session := consent.connect(ctx, u+"/mcp/dev1", "e2e SSO client")
	if res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "process.jobs", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Fatalf("process.jobs: %v %+v", err, res)
	}
	conns := oauthConnections(t, e)
	if len(conns) != 1 || conns[0].Principal != "test-user_at_zitadel.ch" {
		t.Fatalf("relay token list: %+v, want one connection for the admin the address names", conns)
	}
	if audit := e.relayCmd("audit", "--last", "50"); !strings.Contains(audit, "panel.sign_in_sso") {
		t.Fatalf("the SSO sign-in is not audited:\n%s", audit)
	}
}
