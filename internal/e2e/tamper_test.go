package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestJobsRewritingTheirFilesDecideNothing, through the relay and the real
// agent, with its jobs reaching the user manager and then cut off from it
// (permissions.json): a job of principal mallory that rewrites its own
// job.json to name principal victim and writes its own result.json is
// neither listed for victim nor ended, and process.stop stops it for real;
// one that deletes its job.json and leaves a spare's lock is still listed,
// survives the sweep of a `commandcore mcp` started on the same state and
// is stopped too. Each finds its directory as any command can: the last
// argument of its supervisor, its parent.
func TestJobsRewritingTheirFilesDecideNothing(t *testing.T) {
	e, _ := onlineDevice(t)
	connect := func(principal string) *client {
		tok := e.relayCmd("token", "create", "--name", principal, "--devices", "dev1", "--tools", "process.*", "--principal", principal)
		c, err := e.connect("/mcp/dev1", tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	mallory, victim := connect("mallory"), connect("victim")
	tampering := func(tamper string) string {
		t.Helper()
		res := mallory.start(map[string]any{"command": `D=$(tr '\0' '\n' </proc/$PPID/cmdline | tail -n 1) && cd "$D" && ` +
			tamper + ` && echo tampered; exec sleep 60`})
		if res.FailureDomain != "systemd_unit" {
			t.Fatalf("the job runs in %s", res.FailureDomain)
		}
		waitOutput(t, mallory, res.ProcessID, "tampered\n")
		return res.ProcessID
	}
	for _, cut := range []bool{false, true} {
		if cut {
			ceiling := filepath.Join(e.agentConfig, "permissions.json")
			if err := os.WriteFile(ceiling, []byte(`{"schema_version": 1, "tools": ["*"], "jobs_reach_user_manager": false}`), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		t.Run(fmt.Sprintf("cut=%v", cut), func(t *testing.T) {
			framed := tampering(`sed 's/"owner":"mallory"/"owner":"victim"/' job.json >j && mv j job.json && ` +
				`printf '{"schema":1,"exit_code":0,"completed_at":"2026-01-01T00:00:00Z","capture":{"stdout":{},"stderr":{}}}' >r && mv r result.json`)
			if ids := jobIDs(t, victim); slices.Contains(ids, framed) {
				t.Fatal("victim lists a job that wrote victim's name into its job.json")
			}
			if code, _ := victim.fail("process.status", map[string]any{"process_id": framed}); code != "not_found" {
				t.Fatalf("victim's process.status of it: %s, want not_found", code)
			}
			if rec := mallory.status(framed); rec.State != "running" {
				t.Fatalf("a job that wrote its own result.json reads as %s, want running", rec.State)
			}

			spare := tampering(`rm job.json && : >spare.lock`)
			sweeper := newClient(t, e.agentState, nil)
			sweeper.ok("process.jobs", map[string]any{}, nil)
			if !slices.Contains(jobIDs(t, mallory), spare) {
				t.Fatal("a job that made itself look like a spare is not listed")
			}
			if rec := mallory.status(spare); rec.State != "running" {
				t.Fatalf("after a sweep the job is %s, want running", rec.State)
			}

			for _, id := range []string{framed, spare} {
				mallory.ok("process.stop", map[string]any{"process_id": id}, nil)
				if rec := mallory.waitTerminal(id, 20*time.Second); rec.State != "stopped_by_request" {
					t.Fatalf("job %s stopped as %s, want stopped_by_request", id, rec.State)
				}
			}
		})
	}
}
