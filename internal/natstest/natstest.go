// Package natstest runs a real NATS server (the nats-server module) in
// the test's process on a loopback port, for the tests and benchmarks of
// relay replicas; it stops when the test ends.
package natstest

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/commandcore/commandcore/internal/testkit"
)

// readyWithin bounds a server's start.
const readyWithin = 10 * time.Second

// Start runs a server on a free loopback port until tb ends.
func Start(tb testing.TB) *server.Server { return StartOn(tb, -1) }

// StartOn runs a server on loopback port (-1: a free one) until tb ends:
// a server started again on the port of one shut down is its restart.
func StartOn(tb testing.TB, port int) *server.Server {
	tb.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(readyWithin) {
		tb.Fatal("nats-server did not start")
	}
	tb.Cleanup(ns.Shutdown)
	return ns
}

// Secured is a server that speaks only TLS and takes a user and password
// or an NKey, and what a client needs to reach it.
type Secured struct {
	*server.Server
	// URL is tls://127.0.0.1:PORT, without credentials.
	URL string
	// CA is the PEM file that verifies the server's certificate.
	CA string
	// User and Password are one way in; NKeySeed (a file) is another.
	User, Password, NKeySeed string
}

// StartSecured runs a server on a free loopback port that refuses plain
// connections and clients without credentials, until tb ends.
func StartSecured(tb testing.TB) *Secured {
	tb.Helper()
	dir := tb.TempDir()
	cert, key := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	testkit.WriteSelfSigned(tb, cert, key)
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		tb.Fatal(err)
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		tb.Fatal(err)
	}
	seed, _ := user.Seed()
	pub, _ := user.PublicKey()
	s := &Secured{CA: cert, User: "replica", Password: "correct-horse-battery", NKeySeed: filepath.Join(dir, "replica.nk")}
	if err := os.WriteFile(s.NKeySeed, seed, 0o600); err != nil {
		tb.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TLS: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, TLSTimeout: 5,
		Users: []*server.User{{Username: s.User, Password: s.Password}}, Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		tb.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(readyWithin) {
		tb.Fatal("nats-server did not start")
	}
	tb.Cleanup(ns.Shutdown)
	s.Server = ns
	s.URL = fmt.Sprintf("tls://127.0.0.1:%d", ns.Addr().(*net.TCPAddr).Port)
	return s
}
