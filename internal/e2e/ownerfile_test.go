package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestOwnerFilesThatAreNotFiles: a FIFO, a symlink or a 1 GiB sparse file
// in place of job-resources.json or permissions.json is refused at once:
// process.start answers within 1 s (policy_invalid, or permission_denied
// from the ceiling) and `commandcore status` returns and says why.
func TestOwnerFilesThatAreNotFiles(t *testing.T) {
	kinds := map[string]struct {
		make   func(t *testing.T, path, valid string)
		reason string
	}{
		"fifo": {func(t *testing.T, path, _ string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "it is not a regular file"},
		"symlink": {func(t *testing.T, path, valid string) {
			// The link leads to a valid file: following it would load.
			target := filepath.Join(t.TempDir(), "real.json")
			if err := os.WriteFile(target, []byte(valid), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "it is a symbolic link"},
		"1 GiB sparse file": {func(t *testing.T, path, _ string) {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, 1<<30); err != nil {
				t.Fatal(err)
			}
		}, "it is larger than 65536 bytes"},
	}
	files := []struct {
		name, valid, code string
		inConfig          bool
	}{
		{"job-resources.json", `{"memory_max_bytes": 268435456}`, "policy_invalid", false},
		{"permissions.json", `{"schema_version":1,"tools":["process.*"]}`, "permission_denied", true},
	}
	for _, f := range files {
		for kind, k := range kinds {
			t.Run(f.name+" as "+kind, func(t *testing.T) {
				state, cfg := t.TempDir(), t.TempDir()
				dir := state
				if f.inConfig {
					dir = cfg
				}
				k.make(t, filepath.Join(dir, f.name), f.valid)
				c := newClient(t, state, nil, "--config-dir", cfg)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				res, err := c.session.CallTool(ctx, &mcp.CallToolParams{Name: "process.start", Arguments: map[string]any{"command": "true"}})
				if err != nil {
					t.Fatalf("process.start did not answer within 1 s: %v", err)
				}
				var e struct {
					Error struct{ Code, Message string }
				}
				raw, _ := json.Marshal(res.StructuredContent)
				if json.Unmarshal(raw, &e); !res.IsError || e.Error.Code != f.code {
					t.Fatalf("process.start: %s, want %s", raw, f.code)
				}

				st := statusWithin(t, state, cfg, 10*time.Second)
				got := st.Policy.Error
				if f.inConfig {
					got = st.Permissions.Error
				}
				if got != k.reason {
					t.Fatalf("status says %q, want %q", got, k.reason)
				}
			})
		}
	}
}

// ownerFilesStatus is what status says about the owner's files.
type ownerFilesStatus struct {
	Policy      struct{ Error string }
	Permissions struct{ Error string }
}

// statusWithin runs `commandcore status --json` and fails if it does not
// return within d.
func statusWithin(t *testing.T, state, cfg string, d time.Duration) ownerFilesStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	// status exits non-zero without a running agent; its report is still out.
	out, _ := exec.CommandContext(ctx, bin, "status", "--json", "--state-dir", state, "--config-dir", cfg).Output()
	if ctx.Err() != nil {
		t.Fatalf("status did not return within %v", d)
	}
	var st ownerFilesStatus
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status --json: %v: %s", err, out)
	}
	return st
}
