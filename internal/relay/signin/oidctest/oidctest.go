// Package oidctest runs a real OpenID provider on loopback for tests: the
// example server of zitadel/oidc's op package, with its two users
// (test-user, e-mail test-user@zitadel.ch, and test-user2,
// test-user2@zitadel.ch, both verified; password Password) and the web
// clients a test names. Only tests import it, so the provider is never
// linked into the binary.
package oidctest

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// The provider's users: Allowed's e-mail address and their password.
const (
	Allowed  = "test-user@zitadel.ch"
	Other    = "test-user2@zitadel.ch"
	Password = "verysecure"
)

// Client is a web application the provider knows: its ID, secret and the
// one redirect URI it may use.
type Client struct {
	ID, Secret, RedirectURI string
}

// Start runs the provider until the test ends and returns its issuer URL.
func Start(tb testing.TB, clients ...Client) (issuer string) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	issuer = "http://" + ln.Addr().String()
	known := map[string]*storage.Client{}
	for _, c := range clients {
		known[c.ID] = storage.WebClient(c.ID, c.Secret, c.RedirectURI)
	}
	st := storage.NewStorageWithClients(storage.NewUserStore(issuer), known)
	h := exampleop.SetupServer(issuer, st, slog.New(slog.NewTextHandler(io.Discard, nil)), false, op.WithAllowInsecure())
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	tb.Cleanup(srv.Close)
	return issuer
}

// Username is the name Allowed signs in with at the provider of issuer:
// the example's users are named after its host.
func Username(issuer string) string {
	u, err := url.Parse(issuer)
	if err != nil {
		return ""
	}
	return "test-user@" + u.Hostname()
}
