package authz

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/toolspec"
)

const device = "2f1c0f9e-8a43-4a55-9d0b-0c3c4b7c9a11"

func call(meta mcp.Meta) *mcp.CallToolRequest {
	return &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Meta: meta, Name: "process.jobs"}}
}

func code(err error) errcode.Code {
	if err == nil {
		return ""
	}
	return errcode.From(err).Code
}

// gate2 drops a gate's principal, for tests about admission only.
func gate2(_ principal.Principal, err error) error { return err }

func TestRemoteChecksTheGrantOnEveryCall(t *testing.T) {
	key, err := NewGrantKey()
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public().(ed25519.PublicKey)
	now := time.Now()
	clock := func() time.Time { return now }
	gate := RemoteGate(t.TempDir(), device, pub, NewUsedGrants(), clock)
	mint := func(dev, tool string) mcp.Meta {
		g, err := MintGrant(key, dev, tool, "tok_1", "", now)
		if err != nil {
			t.Fatal(err)
		}
		return mcp.Meta{GrantMetaKey: g}
	}
	ctx := context.Background()
	if err := gate2(gate(ctx, call(mint(device, "process.jobs")), "process.jobs")); err != nil {
		t.Fatalf("a valid grant: %v", err)
	}
	for name, meta := range map[string]mcp.Meta{
		"no grant":       nil,
		"another device": mint("b3b0a1de-0000-4000-8000-000000000000", "process.jobs"),
		"another tool":   mint(device, "process.run"),
	} {
		if c := code(gate2(gate(ctx, call(meta), "process.jobs"))); c != errcode.GrantInvalid {
			t.Errorf("%s: %q", name, c)
		}
	}
	// A grant that was fine expires, even for calls about running jobs.
	valid := mint(device, "process.jobs")
	now = now.Add(10 * time.Minute)
	if c := code(gate2(gate(ctx, call(valid), "process.jobs"))); c != errcode.GrantInvalid {
		t.Errorf("expired grant: %q", c)
	}
	// A grant from another key is refused.
	other, _ := NewGrantKey()
	g, _ := MintGrant(other, device, "process.jobs", "tok_1", "", now)
	if c := code(gate2(gate(ctx, call(mcp.Meta{GrantMetaKey: g}), "process.jobs"))); c != errcode.GrantInvalid {
		t.Errorf("foreign key: %q", c)
	}
}

func TestCeilingAppliesAfterTheGrant(t *testing.T) {
	key, _ := NewGrantKey()
	dir := t.TempDir()
	now := time.Now()
	gate := RemoteGate(dir, device, key.Public().(ed25519.PublicKey), NewUsedGrants(), func() time.Time { return now })
	// Each call needs a fresh grant.
	req := func() *mcp.CallToolRequest {
		g, _ := MintGrant(key, device, "process.jobs", "tok_1", "", now)
		return call(mcp.Meta{GrantMetaKey: g})
	}
	ctx := context.Background()
	file := filepath.Join(dir, "permissions.json")
	if err := os.WriteFile(file, []byte(`{"schema_version":1,"tools":["system.*"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := code(gate2(gate(ctx, req(), "process.jobs"))); c != errcode.PermissionDenied {
		t.Fatalf("outside the ceiling: %q", c)
	}
	// The owner's edit takes effect on the next call.
	os.WriteFile(file, []byte(`{"schema_version":1,"tools":["process.*"]}`), 0o600)
	if err := gate2(gate(ctx, req(), "process.jobs")); err != nil {
		t.Fatalf("inside the ceiling: %v", err)
	}
	// A broken ceiling fails closed, locally too.
	os.WriteFile(file, []byte(`{"schema_version":1,"tools":`), 0o600)
	if c := code(gate2(gate(ctx, req(), "process.jobs"))); c != errcode.PermissionDenied {
		t.Fatalf("malformed ceiling: %q", c)
	}
	if c := code(gate2(LocalGate(dir)(ctx, call(nil), "system.metrics"))); c != errcode.PermissionDenied {
		t.Fatalf("malformed ceiling, local server: %q", c)
	}
	os.Remove(file)
	if err := gate2(LocalGate(dir)(ctx, call(nil), "process.run")); err != nil {
		t.Fatalf("no ceiling: %v", err)
	}
}

func TestRemoteActsForTheGrantsPrincipalOnce(t *testing.T) {
	key, _ := NewGrantKey()
	now := time.Now()
	gate := RemoteGate(t.TempDir(), device, key.Public().(ed25519.PublicKey), NewUsedGrants(), func() time.Time { return now })
	ctx := context.Background()
	mint := func(sub string) *mcp.CallToolRequest {
		g, err := MintGrant(key, device, "process.jobs", sub, "", now)
		if err != nil {
			t.Fatal(err)
		}
		return call(mcp.Meta{GrantMetaKey: g})
	}
	req := mint("ci-bot")
	who, err := gate(ctx, req, "process.jobs")
	if err != nil || who != "ci-bot" {
		t.Fatalf("gate = %q, %v; want the grant's principal", who, err)
	}
	// The same grant again is a replay, also a minute later while it
	// still verifies.
	if c := code(gate2(gate(ctx, req, "process.jobs"))); c != errcode.GrantInvalid {
		t.Fatalf("replayed grant: %q", c)
	}
	now = now.Add(59 * time.Second)
	if c := code(gate2(gate(ctx, req, "process.jobs"))); c != errcode.GrantInvalid {
		t.Fatalf("replayed grant a minute later: %q", c)
	}
	// No relay may act as the machine's owner or name an unrecordable
	// principal.
	for _, sub := range []string{"local", "LOCAL", "a/b", "a b"} {
		if c := code(gate2(gate(ctx, mint(sub), "process.jobs"))); c != errcode.GrantInvalid {
			t.Errorf("principal %q: %q", sub, c)
		}
	}
	// Locally, every call is the owner's.
	if who, err := LocalGate(t.TempDir())(ctx, call(nil), "process.jobs"); err != nil || who != principal.Local {
		t.Fatalf("local gate = %q, %v", who, err)
	}
}

// TestAdminToolsAreListingReadingAndStopping pins what an admin grant may
// call, each a tool this build's devices serve.
func TestAdminToolsAreListingReadingAndStopping(t *testing.T) {
	got := slices.Sorted(slices.Values(AdminTools))
	if want := []string{"process.jobs", "process.output", "process.screen", "process.status", "process.stop"}; !slices.Equal(got, want) {
		t.Fatalf("AdminTools = %v, want %v", got, want)
	}
	served := map[string]bool{}
	for _, tool := range toolspec.Tools() {
		served[tool.Name] = true
	}
	for _, tool := range AdminTools {
		if !served[tool] {
			t.Errorf("AdminTools names %s, which no device serves", tool)
		}
	}
}

// adminGate is a remote gate over dir and a minter of fresh grants for it.
func adminGate(t *testing.T, dir string) (Gate, func(tool, sub string) *mcp.CallToolRequest) {
	t.Helper()
	key, err := NewGrantKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	gate := RemoteGate(dir, device, key.Public().(ed25519.PublicKey), NewUsedGrants(), func() time.Time { return now })
	return gate, func(tool, sub string) *mcp.CallToolRequest {
		g, err := MintGrant(key, device, tool, sub, "", now)
		if err != nil {
			t.Fatal(err)
		}
		return call(mcp.Meta{GrantMetaKey: g})
	}
}

// TestAdminGrantListsReadsAndStopsOnly: a grant naming an admin acts for
// the admin on the five admin tools and is refused with permission_denied,
// saying why, on every other tool; an admin name that is not valid is an
// invalid grant.
func TestAdminGrantListsReadsAndStopsOnly(t *testing.T) {
	gate, mint := adminGate(t, t.TempDir())
	ctx := context.Background()
	admin := principal.Admin("alice")
	for _, tool := range []string{"process.jobs", "process.status", "process.output", "process.screen", "process.stop"} {
		if who, err := gate(ctx, mint(tool, string(admin)), tool); err != nil || who != admin {
			t.Errorf("%s with an admin grant: %q, %v; want the admin", tool, who, err)
		}
	}
	for _, tool := range []string{"process.start", "process.run", "process.input", "process.forget", "process.wait", "files.read", "files.write", "process.list", "system.metrics"} {
		who, err := gate(ctx, mint(tool, string(admin)), tool)
		if !errcode.Is(err, errcode.PermissionDenied) || who != "" {
			t.Errorf("%s with an admin grant: %q, %v; want permission_denied", tool, who, err)
			continue
		}
		if msg := errcode.From(err).Message; msg != "an admin grant may only list, read and stop jobs" {
			t.Errorf("%s with an admin grant: message %q", tool, msg)
		}
	}
	for _, sub := range []string{"admin:", "admin:a b", "admin:a/b", "admin:" + strings.Repeat("a", principal.MaxBytes-len(principal.AdminPrefix)+1), "Admin:alice"} {
		if c := code(gate2(gate(ctx, mint("process.jobs", sub), "process.jobs"))); c != errcode.GrantInvalid {
			t.Errorf("principal %q: %q, want grant_invalid", sub, c)
		}
	}
}

// TestOwnerRefusesAdmins: with "admin": false in permissions.json every
// admin-grant call is admin_refused, even on the admin tools the ceiling
// lists, while a client token's principal goes on as before; the file is
// read on every call, so taking the key out admits the admin again.
func TestOwnerRefusesAdmins(t *testing.T) {
	dir := t.TempDir()
	gate, mint := adminGate(t, dir)
	ctx := context.Background()
	file := filepath.Join(dir, CeilingFile)
	if err := os.WriteFile(file, []byte(`{"schema_version": 1, "tools": ["process.*"], "admin": false}`), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := string(principal.Admin("alice"))
	for _, tool := range AdminTools {
		who, err := gate(ctx, mint(tool, admin), tool)
		if !errcode.Is(err, errcode.AdminRefused) || who != "" {
			t.Errorf("%s with an admin grant: %q, %v; want admin_refused", tool, who, err)
			continue
		}
		if msg := errcode.From(err).Message; msg != "this device does not allow admin views" {
			t.Errorf("%s: message %q", tool, msg)
		}
		if who, err := gate(ctx, mint(tool, "tok_1"), tool); err != nil || who != "tok_1" {
			t.Errorf("%s with a client's grant: %q, %v", tool, who, err)
		}
	}
	// A tool no admin may call stays permission_denied: refusing admins
	// tells nothing new about it.
	if c := code(gate2(gate(ctx, mint("process.start", admin), "process.start"))); c != errcode.PermissionDenied {
		t.Errorf("process.start with an admin grant: %q", c)
	}
	if err := os.WriteFile(file, []byte(`{"schema_version": 1, "tools": ["process.*"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if who, err := gate(ctx, mint("process.jobs", admin), "process.jobs"); err != nil || who != principal.Admin("alice") {
		t.Fatalf("after the owner's edit: %q, %v", who, err)
	}
	// The ceiling's tools bind admins too.
	if err := os.WriteFile(file, []byte(`{"schema_version": 1, "tools": ["process.jobs"], "admin": true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := code(gate2(gate(ctx, mint("process.stop", admin), "process.stop"))); c != errcode.PermissionDenied {
		t.Errorf("process.stop outside the ceiling's tools: %q", c)
	}
}
