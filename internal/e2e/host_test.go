package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFilesSearchOverMCP(t *testing.T) {
	root := t.TempDir()
	for p, body := range map[string]string{
		"a/notes.txt":        "alpha\nneedle here\nomega\n",
		"a/skip/notes.txt":   "needle hidden\n",
		"b/needle-name.go":   "package b\n",
		"b/regexish.txt":     "a.*b literally\n",
		"b/deeper/other.txt": "no match\n",
	} {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, t.TempDir(), nil)
	var res struct {
		Matches []struct {
			Path string `json:"path"`
			Line int    `json:"line"`
			Text string `json:"text"`
		} `json:"matches"`
		Truncated bool `json:"truncated"`
	}
	c.ok("files.search", map[string]any{"root": root, "text": "needle", "exclude_dirs": []string{"skip"}}, &res)
	if len(res.Matches) != 1 || res.Matches[0].Path != filepath.Join(root, "a/notes.txt") || res.Matches[0].Line != 2 || res.Matches[0].Text != "needle here" {
		t.Fatalf("text search: %+v", res.Matches)
	}
	c.ok("files.search", map[string]any{"root": root, "name": "needle"}, &res)
	if len(res.Matches) != 1 || res.Matches[0].Path != filepath.Join(root, "b/needle-name.go") {
		t.Fatalf("name search: %+v", res.Matches)
	}
	c.ok("files.search", map[string]any{"root": root, "text": "a.*b"}, &res)
	if len(res.Matches) != 1 || res.Matches[0].Path != filepath.Join(root, "b/regexish.txt") {
		t.Fatalf("a regex-looking text must match literally: %+v", res.Matches)
	}
	for _, bad := range []map[string]any{
		{"root": "relative", "text": "x"},
		{"root": root},
		{"root": root, "text": "x", "glob": "*.go"},
	} {
		if code, _ := c.fail("files.search", bad); code != "invalid_argument" {
			t.Errorf("%v: %s, want invalid_argument", bad, code)
		}
	}
	if code, _ := c.fail("files.search", map[string]any{"root": "/nonexistent-root-xyz", "text": "x"}); code != "not_found" {
		t.Errorf("missing root: %s, want not_found", code)
	}
}

func TestSystemMetricsAndProcessListOverMCP(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	var m struct {
		CPU struct {
			Count int `json:"count"`
		} `json:"cpu"`
		BootID string `json:"boot_id"`
		Health struct {
			Verdict string `json:"verdict"`
		} `json:"health"`
		GPU any `json:"gpu"`
	}
	c.ok("system.metrics", map[string]any{}, &m)
	if m.CPU.Count < 1 || m.BootID == "" || m.Health.Verdict == "" || m.GPU != nil {
		t.Fatalf("system.metrics: %+v", m)
	}
	if code, _ := c.fail("system.metrics", map[string]any{"gpus": true}); code != "invalid_argument" {
		t.Fatalf("unknown metrics argument: %s", code)
	}
	res := c.start(map[string]any{"command": "exec sleep 60"})
	t.Cleanup(func() { c.stopAndWait(res.ProcessID) })
	var list struct {
		Processes []struct {
			PID     int    `json:"pid"`
			Name    string `json:"name"`
			Managed bool   `json:"managed"`
		} `json:"processes"`
	}
	c.ok("process.list", map[string]any{"managed": true, "name": "sleep"}, &list)
	child := c.status(res.ProcessID).Identity.Child.PID
	found := false
	for _, p := range list.Processes {
		if !p.Managed {
			t.Errorf("managed filter returned %+v", p)
		}
		found = found || p.PID == child
	}
	if !found {
		t.Fatalf("the job's sleep %d is not among managed processes: %+v", child, list.Processes)
	}
	if code, _ := c.fail("process.list", map[string]any{"regex": "x"}); code != "invalid_argument" {
		t.Fatalf("unknown process.list filter: %s", code)
	}
}
