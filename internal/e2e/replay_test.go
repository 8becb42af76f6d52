package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/enrollment"
	"github.com/commandcore/commandcore/internal/transport"
)

// testRelay is a relay written by the test: it accepts the real agent's
// link and lets the test send it whatever it wants, as a relay that was
// taken over could.
type testRelay struct {
	key      ed25519.PrivateKey
	deviceID string
	sessions chan *mcp.ClientSession
}

// startTestRelay serves /v1/agent on loopback, stores an identity for it
// in a fresh config directory and starts the real agent on it.
func startTestRelay(t *testing.T) *testRelay {
	t.Helper()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	secret := make([]byte, 32)
	rand.Read(secret)
	r := &testRelay{key: key, deviceID: uuid.NewString(), sessions: make(chan *mcp.ClientSession, 4)}
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ws, err := up.Upgrade(w, req, nil)
		if err != nil {
			return
		}
		conn := transport.Server(ws, secret, transport.Options{})
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-relay", Version: "1"}, nil).Connect(req.Context(), conn, nil)
		if err != nil {
			return
		}
		r.sessions <- cs
		<-conn.Done()
	}))
	t.Cleanup(srv.Close)
	config := t.TempDir()
	id := &enrollment.Credential{
		Schema: enrollment.Schema, Server: srv.URL, DeviceID: r.deviceID, Name: "dev1",
		Token: "ccd_test", Secret: secret, GrantKey: authz.EncodeGrantKey(key.Public().(ed25519.PublicKey)),
		EnrolledAt: time.Now().UTC(),
	}
	if err := enrollment.Save(config, id); err != nil {
		t.Fatal(err)
	}
	agent := exec.Command(bin, "agent", "--state-dir", t.TempDir(), "--config-dir", config)
	agent.Stderr = os.Stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	return r
}

// session waits for the agent's link and returns the MCP session over it.
func (r *testRelay) session(t *testing.T) *mcp.ClientSession {
	t.Helper()
	select {
	case cs := <-r.sessions:
		return cs
	case <-time.After(20 * time.Second):
		t.Fatal("the agent never linked")
		return nil
	}
}

// TestReplayedGrantIsRefused: a grant that carried a real call is refused
// when it comes again, even well within its life, and even for a call
// that changes nothing.
func TestReplayedGrantIsRefused(t *testing.T) {
	r := startTestRelay(t)
	cs := r.session(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := authz.MintGrant(r.key, r.deviceID, "process.jobs", "alice", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	call := func() (*mcp.CallToolResult, string) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "process.jobs", Meta: mcp.Meta{authz.GrantMetaKey: g}})
		if err != nil {
			t.Fatal(err)
		}
		var sc struct {
			Error struct{ Code string } `json:"error"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(raw, &sc)
		return res, sc.Error.Code
	}
	if res, code := call(); res.IsError {
		t.Fatalf("the first use of a fresh grant: %s", code)
	}
	if res, code := call(); !res.IsError || code != "grant_invalid" {
		t.Fatalf("the replayed grant: isError %v, code %q", res.IsError, code)
	}
	// A fresh grant still works: the refusal was about the replay.
	g, _ = authz.MintGrant(r.key, r.deviceID, "process.jobs", "alice", "", time.Now())
	if res, code := call(); res.IsError {
		t.Fatalf("a fresh grant after the replay: %s", code)
	}
}

// TestReplayedNumberedGrantIsRefused: the real agent announces that it
// takes numbered grants; a numbered grant that carried a call is refused
// when it comes again, one numbered before it and not yet used is served
// (calls arrive out of order), and so is the next.
func TestReplayedNumberedGrantIsRefused(t *testing.T) {
	r := startTestRelay(t)
	cs := r.session(t)
	if caps := cs.InitializeResult().Capabilities; caps == nil || caps.Experimental[authz.GrantSequenceCapability] == nil {
		t.Fatalf("the agent does not announce %s: %+v", authz.GrantSequenceCapability, caps)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := authz.NewMinter()
	if err != nil {
		t.Fatal(err)
	}
	mint := func() string {
		g, err := authz.MintNumbered(r.key, m, r.deviceID, "process.jobs", "alice", "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	call := func(g string) string {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "process.jobs", Meta: mcp.Meta{authz.GrantMetaKey: g}})
		if err != nil {
			t.Fatal(err)
		}
		var sc struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(raw, &sc)
		return sc.Error.Code + ": " + sc.Error.Message
	}
	first, second := mint(), mint()
	if got := call(second); got != ": " {
		t.Fatalf("grant 2 first: %s", got)
	}
	if got := call(second); got != "grant_invalid: grant was already used (each call needs a fresh grant)" {
		t.Fatalf("grant 2 replayed: %s", got)
	}
	if got := call(first); got != ": " {
		t.Fatalf("grant 1 after grant 2: %s", got)
	}
	if got := call(first); got != "grant_invalid: grant was already used (each call needs a fresh grant)" {
		t.Fatalf("grant 1 replayed: %s", got)
	}
	if got := call(mint()); got != ": " {
		t.Fatalf("grant 3: %s", got)
	}
}

// TestAGrantFloodLocksOutOnlyTheFlooder: a relay that mints fresh grants
// for one principal as fast as the agent takes them gets exactly the
// principal's share accepted, then a refusal that says so; another
// principal's next call is still served.
func TestAGrantFloodLocksOutOnlyTheFlooder(t *testing.T) {
	r := startTestRelay(t)
	cs := r.session(t)
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	call := func(principal string) (bool, string) {
		g, err := authz.MintGrant(r.key, r.deviceID, "process.jobs", principal, "", time.Now())
		if err != nil {
			t.Error(err)
			return false, ""
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "process.jobs", Meta: mcp.Meta{authz.GrantMetaKey: g}})
		if err != nil {
			t.Error(err)
			return false, ""
		}
		var sc struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(raw, &sc)
		return !res.IsError, sc.Error.Code + ": " + sc.Error.Message
	}
	// Every grant of the flood lives 90 s, longer than the flood takes.
	const share = 25_000
	var issued atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for n := issued.Add(1); n <= share && ctx.Err() == nil; n = issued.Add(1) {
				if ok, why := call("mallory"); !ok {
					t.Errorf("mallory's call %d refused: %s", n, why)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if ctx.Err() != nil {
		t.Fatalf("the flood of %d calls did not end in time", share)
	}
	if ok, why := call("mallory"); ok || !strings.Contains(why, "grant_invalid: too many grants of this principal") {
		t.Fatalf("mallory past its share: served %v, %s", ok, why)
	}
	if ok, why := call("alice"); !ok {
		t.Fatalf("mallory's flood locked alice out: %s", why)
	}
}

// TestGrantBoundToAnotherCallIsRefused: the real agent announces that it
// checks call digests, and a grant read off the wire (bound to one call)
// is refused for a call with other arguments, while it is fresh and
// unused; the call it was minted for is served.
func TestGrantBoundToAnotherCallIsRefused(t *testing.T) {
	r := startTestRelay(t)
	cs := r.session(t)
	if caps := cs.InitializeResult().Capabilities; caps == nil || caps.Experimental[authz.BindsCallsCapability] == nil {
		t.Fatalf("the agent does not announce %s: %+v", authz.BindsCallsCapability, caps)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	minted := json.RawMessage(`{"process_id":"7c4e2d1a-0000-4000-8000-000000000001"}`)
	g, err := authz.MintGrant(r.key, r.deviceID, "process.status", "alice", authz.CallDigest("process.status", minted), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	call := func(args json.RawMessage) (code, message string) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "process.status", Arguments: args, Meta: mcp.Meta{authz.GrantMetaKey: g}})
		if err != nil {
			t.Fatal(err)
		}
		var sc struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(raw, &sc)
		return sc.Error.Code, sc.Error.Message
	}
	other := json.RawMessage(`{"process_id":"7c4e2d1a-0000-4000-8000-000000000002"}`)
	if code, msg := call(other); code != "grant_invalid" || !strings.Contains(msg, "another call") {
		t.Fatalf("the grant with other arguments: %q %q, want grant_invalid for another call", code, msg)
	}
	// The refusal did not use the grant up: its own call is served (the
	// job does not exist for alice, which is the tool's answer, not the
	// gate's).
	if code, msg := call(minted); code != "not_found" {
		t.Fatalf("the grant's own call: %q %q, want the tool's not_found", code, msg)
	}
}
