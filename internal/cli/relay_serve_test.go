package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRelayServeSSOFlags: the SSO flags go together, the secret file
// holds one line, the issuer is a URL and the rules parse; each refusal
// is a usage error of one line. All four good give the provider's
// configuration with the rules.
func TestRelayServeSSOFlags(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "secret")
	os.WriteFile(good, []byte("s3cret\n"), 0o600)
	twoLines := filepath.Join(dir, "two")
	os.WriteFile(twoLines, []byte("a\nb\n"), 0o600)
	ok := relayServeOptions{OIDCIssuer: "https://id.example.com", OIDCClientID: "relay", OIDCClientSecretFile: good, OIDCAllow: "@example.com"}
	cfg, err := ok.oidc()
	if err != nil || cfg == nil || cfg.ClientSecret != "s3cret" || !cfg.Rules.Allow("bob@example.com", nil) {
		t.Fatalf("good flags: %+v, %v", cfg, err)
	}
	if cfg, err := (&relayServeOptions{}).oidc(); cfg != nil || err != nil {
		t.Fatalf("no SSO flags: %+v, %v", cfg, err)
	}
	for name, mutate := range map[string]func(*relayServeOptions){
		"issuer alone":     func(o *relayServeOptions) { *o = relayServeOptions{OIDCIssuer: o.OIDCIssuer} },
		"no rules":         func(o *relayServeOptions) { o.OIDCAllow = "" },
		"a malformed rule": func(o *relayServeOptions) { o.OIDCAllow = "@example.com,bob" },
		"not a URL":        func(o *relayServeOptions) { o.OIDCIssuer = "id.example.com" },
		"no secret file":   func(o *relayServeOptions) { o.OIDCClientSecretFile = filepath.Join(dir, "none") },
		"two-line secret":  func(o *relayServeOptions) { o.OIDCClientSecretFile = twoLines },
	} {
		o := ok
		mutate(&o)
		_, err := o.oidc()
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != ExitUsage || strings.Contains(strings.TrimSpace(err.Error()), "\n") {
			t.Errorf("%s: %v, want a usage error of one line", name, err)
		}
	}
}
