package relaybench

import (
	"crypto/sha256"
	"encoding/base64"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/testkit"
)

// oauthAccessToken makes, in the relay's own state, the connection a
// person would allow on the consent page (every tool of the benchmark's
// device) for a registered client, and returns its access token.
func oauthAccessToken(b *testing.B, e *env) string {
	st, err := store.Open(e.relayState)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	return oauthAccess(b, st, e.url+"/mcp/"+device)
}

// oauthAccess is oauthAccessToken in the relay state st (SQLite or
// PostgreSQL), for the MCP endpoint resource.
func oauthAccess(b *testing.B, st *store.Store, resource string) string {
	b.Helper()
	now := time.Now()
	const redirect = "http://127.0.0.1:9/callback"
	client, err := st.RegisterClient(store.OAuthClient{Name: "bench", RedirectURIs: []string{redirect}}, now)
	if err != nil {
		b.Fatal(err)
	}
	verifier := "bench-verifier-bench-verifier-bench-verifier-0123"
	sum := sha256.Sum256([]byte(verifier))
	id, err := st.CreateAuthRequest(store.AuthRequest{ClientID: client.ID, ClientName: client.Name, RedirectURI: redirect,
		Challenge: base64.RawURLEncoding.EncodeToString(sum[:]), Resource: resource,
		CreatedAt: now, ExpiresAt: now.Add(time.Minute)}, now)
	if err != nil {
		b.Fatal(err)
	}
	code, _, err := st.ApproveAuthRequest(id, store.ConnectionSpec{Devices: []string{device}, Tools: []string{"*"},
		Principal: "bench", TTL: 24 * time.Hour, Admin: "bench"}, now)
	if err != nil {
		b.Fatal(err)
	}
	_, pair, err := st.RedeemAuthCode(code, func(*store.AuthCode) error { return nil }, now)
	if err != nil {
		b.Fatal(err)
	}
	return pair.Access
}

// BenchmarkOAuthCallLatency times process.jobs through the relay with a
// static client token and with an OAuth connection's access token, in
// one run, interleaved: what signing in through OAuth costs each call.
// Target (BENCHMARKS.md): p50 OAuth - static <= 0.1 ms.
func BenchmarkOAuthCallLatency(b *testing.B) {
	// The panel on: the relay is an authorization server only with it.
	e := setupRelay(b, "--panel-listen", "127.0.0.1:0")
	oauth := &side{name: "oauth", state: e.agentState, live: &liveOutput{}}
	oauth.session = connect(b, oauth.live, testkit.Relayed(e.url+"/mcp/"+device, oauthAccessToken(b, e)))
	sides := []*side{e.remote, oauth}
	samples := interleave(b, []string{"static", "oauth"}, func(j, _ int) (time.Duration, error) {
		return sides[j].call("process.jobs", nil, nil)
	})
	b.ReportMetric(0, "ns/op")
	static, viaOAuth := report(b, "static", samples[0]).P50, report(b, "oauth", samples[1]).P50
	b.ReportMetric(float64(viaOAuth-static)/float64(time.Millisecond), "oauth-static-p50-ms")
}
