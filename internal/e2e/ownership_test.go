package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/testkit"
)

// TestJobsBelongToTheirPrincipal: a job started through one client token is
// invisible to another token's principal (not_found, as if it did not
// exist, and absent from process.jobs), while tokens that share a principal
// share its jobs, and the machine's owner sees it with its principal.
func TestJobsBelongToTheirPrincipal(t *testing.T) {
	e, a := onlineDevice(t)
	tokB, _ := e.newToken("dev1", "process.*")
	b, err := e.connect("/mcp/dev1", tokB, nil)
	if err != nil {
		t.Fatal(err)
	}
	sharedSecret := e.relayCmd("token", "create", "--name", "ci-1", "--devices", "dev1", "--tools", "process.*", "--principal", "ci")
	sharedSecret2 := e.relayCmd("token", "create", "--name", "ci-2", "--devices", "dev1", "--tools", "process.*", "--principal", "ci")
	ci1, err := e.connect("/mcp/dev1", sharedSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	ci2, err := e.connect("/mcp/dev1", sharedSecret2, nil)
	if err != nil {
		t.Fatal(err)
	}

	running := a.start(map[string]any{"command": "sleep 30"}).ProcessID
	done := a.start(map[string]any{"command": "echo mine", "wait_ms": 10000}).ProcessID
	if rec := a.waitTerminal(done, 20e9); rec.State != "exited" {
		t.Fatalf("a's finished job: %+v", rec)
	}

	var missing string
	for _, id := range []string{running, done} {
		for _, call := range []struct {
			tool string
			args map[string]any
		}{
			{"process.status", map[string]any{"process_id": id}},
			{"process.output", map[string]any{"process_id": id}},
			{"process.input", map[string]any{"process_id": id, "data": "x"}},
			{"process.resize", map[string]any{"process_id": id, "cols": 80, "rows": 24}},
			{"process.stop", map[string]any{"process_id": id}},
			{"process.forget", map[string]any{"process_id": id}},
		} {
			code, msg := b.fail(call.tool, call.args)
			if code != "not_found" {
				t.Errorf("b's %s of a's job: %s %s", call.tool, code, msg)
			}
			if missing == "" {
				missing = msg
			} else if msg != missing {
				t.Errorf("b's %s answers %q, unlike a job that does not exist (%q)", call.tool, msg, missing)
			}
		}
	}
	// The same words as for a job that never existed.
	if _, msg := b.fail("process.status", map[string]any{"process_id": "0b1e5f0c-58a4-4b8e-9a55-d5f1a6b9e001"}); msg != missing {
		t.Errorf("unknown job answers %q, another principal's %q", msg, missing)
	}
	if ids := jobIDs(t, b); len(ids) != 0 {
		t.Errorf("b lists another principal's jobs: %v", ids)
	}

	// b's stop reached nothing: a's job still runs, and a still has both.
	if rec := a.status(running); rec.State != "running" {
		t.Fatalf("a's job after b's stop: %s", rec.State)
	}
	if ids := jobIDs(t, a); len(ids) != 2 {
		t.Fatalf("a lists %v", ids)
	}
	a.ok("process.output", map[string]any{"process_id": done}, nil)

	// Tokens that share the principal "ci" share its jobs.
	shared := ci1.start(map[string]any{"command": "true", "wait_ms": 10000}).ProcessID
	if ids := jobIDs(t, ci2); len(ids) != 1 || ids[0] != shared {
		t.Fatalf("ci-2 lists %v, want ci-1's job %s", ids, shared)
	}
	ci2.ok("process.status", map[string]any{"process_id": shared}, nil)
	if code, _ := a.fail("process.status", map[string]any{"process_id": shared}); code != "not_found" {
		t.Errorf("a sees ci's job: %s", code)
	}

	// The relay's audit names the principal each call acted for.
	if audit := e.relayCmd("audit", "--last", "100", "--json"); !strings.Contains(audit, `"principal":"ci"`) {
		t.Errorf("the audit does not name the shared principal: %s", audit)
	}

	// The machine's owner sees every job, with its principal.
	out, errOut, rc := run(t, "jobs", "show", running, "--json", "--state-dir", e.agentState)
	if rc != 0 {
		t.Fatalf("jobs show: %d %s", rc, errOut)
	}
	var rec struct {
		Owner string `json:"owner"`
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil || !strings.HasPrefix(rec.Owner, "tok_") {
		t.Fatalf("jobs show owner %q (%v): %s", rec.Owner, err, out)
	}
	out, _, _ = run(t, "jobs", "list", "--json", "--state-dir", e.agentState)
	list, err := testkit.DecodeLines[struct {
		ProcessID string `json:"process_id"`
		Owner     string `json:"owner"`
	}]([]byte(out))
	if err != nil {
		t.Fatalf("jobs list --json: %v: %s", err, out)
	}
	owners := map[string]string{}
	for _, j := range list {
		owners[j.ProcessID] = j.Owner
	}
	if len(list) != 3 || owners[shared] != "ci" || owners[running] != rec.Owner || owners[done] != rec.Owner {
		t.Errorf("jobs list owners %v", owners)
	}
	a.stopAndWait(running)
}

func jobIDs(t *testing.T, c *client) []string {
	t.Helper()
	var list struct {
		Jobs []struct {
			ProcessID string `json:"process_id"`
		} `json:"jobs"`
	}
	c.ok("process.jobs", nil, &list)
	ids := []string{}
	for _, j := range list.Jobs {
		ids = append(ids, j.ProcessID)
	}
	return ids
}

// TestFilesSearchCannotReachTheAgentsFiles: a token limited to files.search
// finds nothing of the agent's identity, policy, journal or job output,
// from a root above them or inside them.
func TestFilesSearchCannotReachTheAgentsFiles(t *testing.T) {
	e, owner := onlineDevice(t)
	// Job output inside the state directory carries a marker too.
	const marker = "own-dirs-marker-5b1f"
	owner.start(map[string]any{"command": "echo " + marker, "wait_ms": 10000})
	tok, _ := e.newToken("dev1", "files.search")
	c, err := e.connect("/mcp/dev1", tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	above := filepath.Dir(e.agentConfig)
	if filepath.Dir(e.agentState) != above {
		t.Fatalf("test set-up: %s and %s have different parents", e.agentConfig, e.agentState)
	}
	var res struct {
		Matches []struct{ Path string } `json:"matches"`
	}
	for _, q := range []map[string]any{
		{"root": above, "text": "ccd_"},
		{"root": above, "name": "identity.json"},
		{"root": above, "text": marker},
		{"root": "/", "name": "identity.json", "exclude_dirs": []string{"proc", "sys"}, "timeout_ms": 3000},
	} {
		c.ok("files.search", q, &res)
		for _, m := range res.Matches {
			if strings.HasPrefix(m.Path, e.agentConfig) || strings.HasPrefix(m.Path, e.agentState) {
				t.Errorf("files.search %v reached %s", q, m.Path)
			}
		}
	}
	for _, root := range []string{e.agentConfig, e.agentState, filepath.Join(e.agentState, "jobs")} {
		if code, _ := c.fail("files.search", map[string]any{"root": root, "text": "a"}); code != "permission_denied" {
			t.Errorf("root %s: %s", root, code)
		}
	}
}
