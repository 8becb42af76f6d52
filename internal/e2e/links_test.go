package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPlantedCaptureLinkIsNotFollowed: a job can write its own directory,
// so bob's job replaces its stdout capture with a link to alice's finished
// job's. process.output of bob's job then refuses the capture, in words
// that name no path, and never serves alice's output; alice still reads
// hers.
func TestPlantedCaptureLinkIsNotFollowed(t *testing.T) {
	e, alice := onlineDevice(t)
	tokB, _ := e.newToken("dev1", "process.*")
	bob, err := e.connect("/mcp/dev1", tokB, nil)
	if err != nil {
		t.Fatal(err)
	}
	const marker = "alice-only-output-4c1e"
	aliceJob := alice.start(map[string]any{"command": "echo " + marker, "wait_ms": 10000}).ProcessID
	if rec := alice.waitTerminal(aliceJob, 20*time.Second); rec.State != "exited" {
		t.Fatalf("alice's job: %+v", rec)
	}
	aliceCapture := filepath.Join(e.agentState, "jobs", aliceJob, "stdout.cap")

	// Bob's job is told its own directory on stdin: a job sees it at the
	// same path as the agent does.
	bobJob := bob.start(map[string]any{"command": `read -r d && ln -sf '` + aliceCapture + `' "$d/stdout.cap"`, "stdin": true}).ProcessID
	bobDir := filepath.Join(e.agentState, "jobs", bobJob)
	bob.send(map[string]any{"process_id": bobJob, "data": bobDir + "\n"})
	if rec := bob.waitTerminal(bobJob, 20*time.Second); rec.State != "exited" || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Fatalf("bob's job did not plant its link: %+v", rec)
	}
	if target, err := os.Readlink(filepath.Join(bobDir, "stdout.cap")); err != nil || target != aliceCapture {
		t.Fatalf("test set-up: bob's capture links to %q (%v), want alice's", target, err)
	}

	raw, isErr := bob.call("process.output", map[string]any{"process_id": bobJob})
	if strings.Contains(string(raw), marker) {
		t.Fatalf("bob read alice's output through the link his job planted: %s", raw)
	}
	if !isErr {
		t.Fatalf("process.output served a capture that is a link: %s", raw)
	}
	code, msg := bob.fail("process.output", map[string]any{"process_id": bobJob})
	if code != "internal" || !strings.Contains(msg, "symbolic link") {
		t.Errorf("the refusal: %s %q, want internal, saying it is a link", code, msg)
	}
	if strings.Contains(msg, e.agentState) || strings.Contains(msg, aliceJob) {
		t.Errorf("the refusal names a path or another job: %q", msg)
	}
	if out := string(alice.readAll(aliceJob, 0).data[0]); out != marker+"\n" {
		t.Errorf("alice's own output: %q", out)
	}
}
