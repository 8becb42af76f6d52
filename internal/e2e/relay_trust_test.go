package e2e

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/relaystate"
)

// TestRelayRevocationIsExact: through the real relay and agent, 100 times
// a token of principal alice is revoked with `relay token revoke` while
// calls with it keep arriving; every call that starts after the command
// has returned is refused (process.output and process.stop among them, so
// alice's job still runs at the end), and bob's token, of another
// principal, works throughout.
func TestRelayRevocationIsExact(t *testing.T) {
	e := startRelay(t)
	e.enrollAgent("dev1")
	st, err := relaystate.Open(e.relayState)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	token := func(principal string) (id, secret string) {
		t.Helper()
		tok, secret, err := st.CreateToken(relaystate.TokenSpec{Name: principal, Devices: []string{"dev1"}, Tools: []string{"*"},
			Principal: principal, TTL: time.Hour}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok.ID, secret
	}
	session := func(secret string) *client {
		t.Helper()
		c, err := e.connect("/mcp/dev1", secret, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	_, aliceSecret := token("alice")
	alice := session(aliceSecret)
	waitOnline(t, alice, nil)
	aliceJob := alice.start(map[string]any{"command": "echo alice; exec sleep 300"}).ProcessID
	_, bobSecret := token("bob")
	bob := session(bobSecret)
	bobJob := bob.start(map[string]any{"command": "echo bob; exec sleep 300"}).ProcessID
	output := map[string]any{"process_id": aliceJob}

	// refused reports whether a call was turned away for its token; any
	// other failure ends the test.
	refused := func(c *client, tool string, args any) bool {
		res, err := c.session.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		switch {
		case err != nil && strings.Contains(err.Error(), "Unauthorized"):
			return true
		case err != nil:
			t.Errorf("%s: %v", tool, err)
		case res.IsError:
			t.Errorf("%s failed: %+v", tool, res.StructuredContent)
		}
		return false
	}
	for round := range 100 {
		id, secret := token("alice")
		c := session(secret)
		if refused(c, "process.output", output) {
			t.Fatalf("round %d: a new token was refused", round)
		}
		var late atomic.Int64 // calls that started after the revocation returned and were served
		var revoked atomic.Bool
		halt := hammer(func() {
			after := revoked.Load()
			if !refused(c, "process.output", output) && after {
				late.Add(1)
			}
		})
		func() {
			// Calls keep arriving while the revocation runs.
			defer halt()
			e.relayCmd("token", "revoke", id)
			revoked.Store(true)
			if !refused(c, "process.output", output) || !refused(c, "process.stop", map[string]any{"process_id": aliceJob}) {
				t.Fatalf("round %d: a call right after `relay token revoke` returned was served", round)
			}
		}()
		if n := late.Load(); n > 0 {
			t.Fatalf("round %d: %d calls that started after `relay token revoke` returned were served", round, n)
		}
		if refused(bob, "process.output", map[string]any{"process_id": bobJob}) {
			t.Fatalf("round %d: revoking alice's token refused bob's", round)
		}
	}
	if r := alice.status(aliceJob); r.State != "running" {
		t.Fatalf("alice's job is %s: a stop with a revoked token got through", r.State)
	}
	alice.stopAndWait(aliceJob)
	bob.stopAndWait(bobJob)
}

// hammer calls call over and over in another goroutine until the returned
// function is called, which waits for the last call to end.
func hammer(call func()) (halt func()) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				call()
			}
		}
	}()
	return func() { close(stop); <-done }
}
