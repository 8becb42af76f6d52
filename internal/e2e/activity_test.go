package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestActivityJournalIsContentFree(t *testing.T) {
	state := t.TempDir()
	marker := "MARKER-9b1e77"
	cwd := filepath.Join(t.TempDir(), marker+"-dir")
	if err := os.Mkdir(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, state, nil)
	c.start(map[string]any{"command": "echo " + marker, "cwd": cwd, "env": map[string]string{"V": marker}, "name": "n", "wait_ms": 10000})
	c.fail("process.start", map[string]any{"command": "true", "cwd": "/nonexistent/" + marker})
	c.fail("process.status", map[string]any{"process_id": marker})
	c.fail("process.start", map[string]any{"command": "true", marker: 1})
	res := c.start(map[string]any{"command": "echo " + marker + "; exec sleep 60", "env": map[string]string{marker: "x"}})
	c.stopAndWait(res.ProcessID)

	out, _, code := run(t, "activity", "--last", "100", "--json", "--state-dir", state)
	if code != 0 {
		t.Fatalf("activity --last: exit %d", code)
	}
	var kinds, tools, phases []string
	sc := bufio.NewScanner(strings.NewReader(out))
	n := 0
	for sc.Scan() {
		var e struct{ Kind, Tool, Phase, Outcome, ErrorCode string }
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("not one JSON object per line: %q", sc.Text())
		}
		kinds, tools, phases = append(kinds, e.Kind), append(tools, e.Tool), append(phases, e.Phase)
		n++
	}
	joined := strings.Join(append(append(kinds, tools...), phases...), " ")
	for _, want := range []string{"tool_call", "launch_phase", "process.start", "process.status", "admission", "unit_start", "identity_claim"} {
		if !strings.Contains(joined, want) {
			t.Errorf("journal lacks %q: %s", want, joined)
		}
	}
	if n < 10 {
		t.Errorf("only %d journal entries", n)
	}
	errs, _, _ := run(t, "activity", "--last", "100", "--errors", "--json", "--state-dir", state)
	if strings.Count(errs, "\n") != 3 || !strings.Contains(errs, "invalid_argument") {
		t.Errorf("--errors should keep exactly the 3 failed calls:\n%s", errs)
	}
	if human, _, _ := run(t, "activity", "--last", "3", "--state-dir", state); strings.Count(human, "\n") != 3 {
		t.Errorf("--last 3 printed:\n%s", human)
	}
	entries, _ := os.ReadDir(state)
	checked := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "activity.db") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(state, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		checked++
		if bytes.Contains(bytes.ToLower(data), bytes.ToLower([]byte(marker))) {
			t.Errorf("%s contains the marker", e.Name())
		}
	}
	if checked == 0 {
		t.Fatal("no journal files found")
	}
}

func TestActivityFollows(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state, nil)
	c.start(map[string]any{"command": "true"})
	cmd := exec.Command(bin, "activity", "--json", "--state-dir", state)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// The follow starts with the recent tail, then shows new entries.
	time.Sleep(500 * time.Millisecond)
	c.fail("process.status", map[string]any{"process_id": "00000000-0000-0000-0000-000000000000"})
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("activity exited while following")
			}
			if strings.Contains(l, `"process.status"`) && strings.Contains(l, `"not_found"`) {
				return
			}
		case <-deadline:
			t.Fatal("a new entry never appeared in the follow")
		}
	}
}

func TestBrokenJournalDoesNotFailLaunches(t *testing.T) {
	state := t.TempDir()
	// A journal that cannot be opened: garbage where the database should be.
	if err := os.WriteFile(filepath.Join(state, "activity.db"), bytes.Repeat([]byte("not a database "), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, state, nil)
	res := c.start(map[string]any{"command": "echo still works", "wait_ms": 10000})
	if res.State != "exited" || res.Output == nil || res.Output.Stdout.Data != "still works\n" {
		t.Fatalf("launch with a broken journal: %s %+v", res.State, res.Output)
	}
	if _, _, code := run(t, "activity", "--last", "5", "--state-dir", state); code != 1 {
		t.Fatalf("activity on a broken journal: exit %d, want 1 with an error", code)
	}
}
