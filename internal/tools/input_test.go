package tools

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
)

// session connects a client to a server of this build's registrations
// behind gate, whose job service is empty: a call answers what it does
// before it reaches any job (reaching one fails as internal).
func session(t *testing.T, gate Gate) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	srv := mcp.NewServer(&mcp.Implementation{Name: "commandcore", Version: "test"}, nil)
	Register(srv, &jobs.Service{}, &Host{}, gate)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// failure calls tool and returns the error the client sees in the
// result's structured content; a call that succeeds fails the test.
func failure(t *testing.T, cs *mcp.ClientSession, meta mcp.Meta, tool string, args map[string]any) errcode.Error {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Meta: meta, Name: tool, Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ Error errcode.Error }
	if err := json.Unmarshal(raw, &out); err != nil || !res.IsError {
		t.Fatalf("%s: isError %v, structured content %s (%v)", tool, res.IsError, raw, err)
	}
	return out.Error
}

// TestSecretPromptIsNotAskedHere: process.input's secret_prompt is for the
// relay's panel, which takes it off the call; a device asked directly,
// locally or over the link, answers elicitation_unsupported without
// echoing the prompt, once the request is one the panel would take.
func TestSecretPromptIsNotAskedHere(t *testing.T) {
	key, err := authz.NewGrantKey()
	if err != nil {
		t.Fatal(err)
	}
	const device = "2f1c0f9e-8a43-4a55-9d0b-0c3c4b7c9a11"
	remote := authz.RemoteGate(t.TempDir(), device, key.Public().(ed25519.PublicKey), authz.NewUsedGrants(), time.Now)
	grant := func() mcp.Meta {
		g, err := authz.MintGrant(key, device, "process.input", "tok_1", "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return mcp.Meta{authz.GrantMetaKey: g}
	}
	servers := map[string]struct {
		cs   *mcp.ClientSession
		meta func() mcp.Meta
	}{
		"commandcore mcp": {session(t, authz.LocalGate(t.TempDir())), func() mcp.Meta { return nil }},
		"over the link":   {session(t, remote), grant},
	}
	id := uuid.NewString()
	fits := strings.Repeat("p", limits.SecretPromptMaxBytes-len("é")) + "é"
	for name, s := range servers {
		for _, prompt := range []string{"Password for sudo:", "Passwort für sudo:", fits} {
			e := failure(t, s.cs, s.meta(), "process.input", map[string]any{"process_id": id, "secret_prompt": prompt, "wait_ms": 1000})
			if e.Code != errcode.ElicitationUnsupported || e.Message != "secret input needs the relay's panel: the person types it there; this server cannot ask" {
				t.Errorf("%s, a %d-byte prompt: %s: %s; want elicitation_unsupported", name, len(prompt), e.Code, e.Message)
			}
		}
		for what, args := range map[string]map[string]any{
			"with data":             {"secret_prompt": "Password:", "data": "hunter2"},
			"with eof":              {"secret_prompt": "Password:", "eof": true},
			"too long":              {"secret_prompt": fits + "p"},
			"with a newline":        {"secret_prompt": "Password\n:"},
			"with a terminal code":  {"secret_prompt": "\x1b[2JPassword:"},
			"with a bad wait_ms":    {"secret_prompt": "Password:", "wait_ms": -1},
			"as a number, not text": {"secret_prompt": 5},
		} {
			args["process_id"] = id
			e := failure(t, s.cs, s.meta(), "process.input", args)
			if e.Code != errcode.InvalidArgument {
				t.Errorf("%s, secret_prompt %s: %s: %s; want invalid_argument", name, what, e.Code, e.Message)
			}
			if strings.Contains(e.Message, "Password") || strings.Contains(e.Message, "hunter2") || strings.Contains(e.Message, "ppp") {
				t.Errorf("%s, secret_prompt %s: the message %q echoes the request", name, what, e.Message)
			}
		}
	}
}
