// Package natstest runs a real NATS server (the nats-server module) in
// the test's process on a loopback port, for the tests and benchmarks of
// relay replicas; it stops when the test ends.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
