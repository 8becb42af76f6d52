package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type fileRead struct {
	Data          string `json:"data"`
	Encoding      string `json:"encoding"`
	Size          int64  `json:"size"`
	SHA256        string `json:"sha256"`
	MTime         string `json:"mtime"`
	Offset        int64  `json:"offset"`
	NextOffset    int64  `json:"next_offset"`
	NextLine      int    `json:"next_line"`
	EOF           bool   `json:"eof"`
	LineTruncated bool   `json:"line_truncated"`
}

type fileWritten struct {
	BytesWritten int64  `json:"bytes_written"`
	Size         int64  `json:"size"`
	SHA256       string `json:"sha256"`
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// failDetails calls a tool that must fail and returns its error code and
// details.
func (c *client) failDetails(tool string, args any) (string, map[string]any) {
	c.t.Helper()
	raw, isErr := c.call(tool, args)
	if !isErr {
		c.t.Fatalf("%s succeeded, want an error: %s", tool, raw)
	}
	var e struct {
		Error struct {
			Code    string         `json:"code"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		c.t.Fatal(err)
	}
	return e.Error.Code, e.Error.Details
}

// filesRoundTrip drives the four file tools through c in dir as a model
// would: write, read in every way, edit, read again, list; and the
// refusals that keep a model from clobbering what it did not read.
func filesRoundTrip(t *testing.T, c *client, dir string) {
	t.Helper()
	path := filepath.Join(dir, "notes.txt")
	text := "first line\nsecond €uro line\nthird line\n"
	var w fileWritten
	c.ok("files.write", map[string]any{"path": path, "content": text}, &w)
	if w.BytesWritten != int64(len(text)) || w.Size != int64(len(text)) || w.SHA256 != sha(text) {
		t.Fatalf("files.write create: %+v", w)
	}
	if got, _ := os.ReadFile(path); string(got) != text {
		t.Fatalf("the file holds %q", got)
	}

	var r fileRead
	c.ok("files.read", map[string]any{"path": path}, &r)
	if r.Data != text || r.Encoding != "utf-8" || !r.EOF || r.Size != int64(len(text)) || r.SHA256 != sha(text) || r.MTime == "" {
		t.Fatalf("whole read: %+v", r)
	}
	c.ok("files.read", map[string]any{"path": path, "start_line": 2, "line_count": 1}, &r)
	if r.Data != "second €uro line\n" || r.NextLine != 3 || r.EOF {
		t.Fatalf("read by lines: %+v", r)
	}
	// 20 bytes from the start would end inside the euro sign (bytes
	// 18-20): the page stops before it and the next starts with it.
	c.ok("files.read", map[string]any{"path": path, "max_bytes": 20}, &r)
	if r.Data != "first line\nsecond " || r.Encoding != "utf-8" || r.NextOffset != 18 {
		t.Fatalf("read by bytes up to a character: %+v", r)
	}
	c.ok("files.read", map[string]any{"path": path, "offset": r.NextOffset, "max_bytes": 6}, &r)
	if r.Data != "€uro" || r.Offset != 18 || r.NextOffset != 24 {
		t.Fatalf("read by bytes from the character: %+v", r)
	}

	bin := []byte{0, 1, 2, 0xfe, 0xff, '\n', 0x80}
	binPath := filepath.Join(dir, "blob.bin")
	c.ok("files.write", map[string]any{"path": binPath, "content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"}, &w)
	c.ok("files.read", map[string]any{"path": binPath}, &r)
	if got, _ := base64.StdEncoding.DecodeString(r.Data); r.Encoding != "base64" || !bytes.Equal(got, bin) {
		t.Fatalf("binary read: %+v", r)
	}

	var e struct {
		Replacements int    `json:"replacements"`
		SHA256       string `json:"sha256"`
		Diff         string `json:"diff"`
	}
	c.ok("files.edit", map[string]any{"path": path, "expected_sha256": sha(text), "edits": []map[string]any{
		{"old_text": "first line", "new_text": "line one"},
		{"old_text": "third", "new_text": "3rd"},
	}}, &e)
	edited := "line one\nsecond €uro line\n3rd line\n"
	if e.Replacements != 2 || e.SHA256 != sha(edited) || !strings.Contains(e.Diff, "-first line\n+line one\n") || !strings.Contains(e.Diff, "+3rd line\n") {
		t.Fatalf("files.edit: %+v", e)
	}
	c.ok("files.read", map[string]any{"path": path}, &r)
	if r.Data != edited {
		t.Fatalf("after the edit: %q", r.Data)
	}

	var l struct {
		Entries []struct {
			Path string `json:"path"`
			Type string `json:"type"`
			Size int64  `json:"size"`
			Mode string `json:"mode"`
		} `json:"entries"`
		Truncated bool `json:"truncated"`
	}
	c.ok("files.list", map[string]any{"path": dir}, &l)
	found := false
	for _, en := range l.Entries {
		found = found || en.Path == path && en.Type == "file" && en.Size == int64(len(edited)) && en.Mode != ""
	}
	if !found || l.Truncated {
		t.Fatalf("files.list lacks the file with its size: %+v", l)
	}

	// Refusals, each leaving the file as it was.
	if code, _ := c.fail("files.write", map[string]any{"path": path, "content": "clobber"}); code != "already_exists" {
		t.Fatalf("create over an existing file: %s", code)
	}
	if code, _ := c.fail("files.write", map[string]any{"path": path, "content": "clobber", "mode": "overwrite", "expected_sha256": sha(text)}); code != "conflict" {
		t.Fatalf("overwrite with a stale hash: %s", code)
	}
	if code, _ := c.fail("files.edit", map[string]any{"path": path, "expected_sha256": sha(text), "edits": []map[string]any{{"old_text": "line", "new_text": "x"}}}); code != "conflict" {
		t.Fatalf("edit with a stale hash: %s", code)
	}
	code, d := c.failDetails("files.edit", map[string]any{"path": path, "edits": []map[string]any{
		{"old_text": "second", "new_text": "2nd"},
		{"old_text": " line\n", "new_text": "x", "expected_replacements": 1},
	}})
	if code != "edit_mismatch" || d["edit"] != 2.0 || d["found"] != 2.0 || d["expected"] != 1.0 {
		t.Fatalf("an old_text found twice: %s %v", code, d)
	}
	code, d = c.failDetails("files.edit", map[string]any{"path": path, "edits": []map[string]any{{"old_text": "line one\nsecond €uro lime", "new_text": "x"}}})
	if code != "edit_mismatch" || d["found"] != 0.0 || d["closest_line"] != 1.0 {
		t.Fatalf("a near miss: %s %v", code, d)
	}
	code, d = c.failDetails("files.edit", map[string]any{"path": path, "edits": []map[string]any{{"old_text": "3rd line\nfourth", "new_text": "x"}}})
	if code != "edit_mismatch" || d["closest_line"] != 3.0 {
		t.Fatalf("a near miss on line 3: %s %v", code, d)
	}
	if got, _ := os.ReadFile(path); string(got) != edited {
		t.Fatalf("a refused call changed the file: %q", got)
	}
	if code, _ := c.fail("files.read", map[string]any{"path": path, "offset": 1, "start_line": 2}); code != "invalid_argument" {
		t.Fatalf("two ways to read at once: %s", code)
	}
	if code, _ := c.fail("files.edit", map[string]any{"path": path, "edits": []map[string]any{{"old_text": "a", "new_txt": "b"}}}); code != "invalid_argument" {
		t.Fatalf("an unknown field inside an edit: %s", code)
	}
}

func TestFilesOverStdio(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	filesRoundTrip(t, c, t.TempDir())
}

// TestFilesReadRefusesWhatIsNotAFile: a FIFO nobody writes, /dev/zero and
// a directory are refused within a second, never read.
func TestFilesReadRefusesWhatIsNotAFile(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero", dir} {
		began := time.Now()
		code, msg := c.fail("files.read", map[string]any{"path": p})
		if d := time.Since(began); d > time.Second {
			t.Errorf("%s: answered after %v", p, d)
		}
		if code != "invalid_argument" || !strings.Contains(msg, "directory") && !strings.Contains(msg, "FIFO") {
			t.Errorf("%s: %s %q", p, code, msg)
		}
	}
}

// TestFilesJournalIsContentFree: the journal records the file tools'
// names, outcomes and codes, never a path or content.
func TestFilesJournalIsContentFree(t *testing.T) {
	state := t.TempDir()
	const marker = "FILES-MARKER-4c2d"
	dir := filepath.Join(t.TempDir(), marker+"-dir")
	path := filepath.Join(dir, marker+".txt")
	c := newClient(t, state, nil)
	c.ok("files.write", map[string]any{"path": path, "content": marker + "\n", "make_dirs": true}, nil)
	c.ok("files.read", map[string]any{"path": path}, nil)
	c.ok("files.edit", map[string]any{"path": path, "edits": []map[string]any{{"old_text": marker, "new_text": marker + marker}}}, nil)
	c.ok("files.list", map[string]any{"path": dir}, nil)
	c.fail("files.write", map[string]any{"path": path, "content": marker})
	c.fail("files.edit", map[string]any{"path": path, "edits": []map[string]any{{"old_text": marker + "x", "new_text": marker}}})

	out, _, code := run(t, "activity", "--last", "100", "--json", "--state-dir", state)
	if code != 0 {
		t.Fatalf("activity: exit %d", code)
	}
	for _, want := range []string{`"tool":"files.write","job_id":"","phase":"","outcome":"ok"`, `"tool":"files.read"`, `"tool":"files.edit"`,
		`"tool":"files.list"`, `"error_code":"already_exists"`, `"error_code":"edit_mismatch"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the journal lacks %s:\n%s", want, out)
		}
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
		if bytes.Contains(data, []byte(marker)) {
			t.Errorf("%s contains the marker", e.Name())
		}
	}
	if checked == 0 {
		t.Fatal("no journal files found")
	}
}

// TestFilesThroughTheRelay: the same round trip through the relay; the
// agent's own directories refused by every way in; each tool its own name
// in a token's scope and in the owner's ceiling.
func TestFilesThroughTheRelay(t *testing.T) {
	e, c := onlineDevice(t)
	filesRoundTrip(t, c, t.TempDir())

	identity := filepath.Join(e.agentConfig, "identity.json")
	if _, err := os.Stat(identity); err != nil {
		t.Fatalf("test set-up: %v", err)
	}
	other := t.TempDir()
	if filepath.Dir(other) != filepath.Dir(e.agentConfig) {
		t.Fatalf("test set-up: %s and %s have different parents", other, e.agentConfig)
	}
	link := filepath.Join(other, "to-config")
	if err := os.Symlink(e.agentConfig, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		identity,
		// Not cleaned: the agent meets the "..".
		other + "/../" + filepath.Base(e.agentConfig) + "/identity.json",
		filepath.Join(link, "identity.json"),
		filepath.Join(e.agentState, "new-file"),
	} {
		calls := map[string]map[string]any{
			"files.read":  {"path": p},
			"files.write": {"path": p, "content": "x", "mode": "overwrite"},
			"files.edit":  {"path": p, "edits": []map[string]any{{"old_text": "ccd", "new_text": "x"}}},
			"files.list":  {"path": filepath.Dir(p)},
		}
		for tool, args := range calls {
			if code, _ := c.fail(tool, args); code != "permission_denied" {
				t.Errorf("%s %s: %s, want permission_denied", tool, p, code)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(e.agentState, "new-file")); !os.IsNotExist(err) {
		t.Fatal("files.write created a file in the agent's state directory")
	}

	// A token for files.read only reads.
	tok, _ := e.newToken("dev1", "files.read")
	rc, err := e.connect("/mcp/dev1", tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "scoped.txt")
	if err := os.WriteFile(path, []byte("scoped\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var r fileRead
	rc.ok("files.read", map[string]any{"path": path}, &r)
	if r.Data != "scoped\n" {
		t.Fatalf("scoped read: %+v", r)
	}
	list, err := rc.session.ListTools(context.Background(), nil)
	if err != nil || len(list.Tools) != 1 || list.Tools[0].Name != "files.read" {
		t.Fatalf("a files.read token's tools: %v %+v", err, list)
	}
	res, err := rc.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "files.write", Arguments: map[string]any{"path": path, "content": "x", "mode": "overwrite"}})
	if err == nil && !res.IsError {
		t.Fatal("a files.read token wrote a file")
	}

	// The owner's ceiling names each tool too.
	ceiling := filepath.Join(e.agentConfig, "permissions.json")
	if err := os.WriteFile(ceiling, []byte(`{"schema_version":1,"tools":["files.read","files.list","process.jobs"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(ceiling)
	c.ok("files.read", map[string]any{"path": path}, nil)
	c.ok("files.list", map[string]any{"path": filepath.Dir(path)}, nil)
	if code, _ := c.fail("files.write", map[string]any{"path": path, "content": "x", "mode": "overwrite"}); code != "permission_denied" {
		t.Fatalf("files.write outside the owner's ceiling: %s", code)
	}
	if code, _ := c.fail("files.edit", map[string]any{"path": path, "edits": []map[string]any{{"old_text": "scoped", "new_text": "x"}}}); code != "permission_denied" {
		t.Fatalf("files.edit outside the owner's ceiling: %s", code)
	}
	if got, _ := os.ReadFile(path); string(got) != "scoped\n" {
		t.Fatalf("a refused call changed the file: %q", got)
	}
}
