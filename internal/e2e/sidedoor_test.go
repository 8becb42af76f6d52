package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/testkit"
)

// twoPrincipals is a relay and device with alice, allowed every tool, and
// bob, whose token allows tools only.
func twoPrincipals(t *testing.T, tools string) (e *relayEnv, alice, bob *client) {
	t.Helper()
	e, alice = onlineDevice(t)
	tok, _ := e.newToken("dev1", tools)
	bob, err := e.connect("/mcp/dev1", tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e, alice, bob
}

type listedProcess struct {
	PID       int    `json:"pid"`
	Name      string `json:"name"`
	Args      string `json:"args"`
	Cgroup    string `json:"cgroup"`
	Managed   bool   `json:"managed"`
	ProcessID string `json:"process_id"`
}

func processList(c *client, args map[string]any) []listedProcess {
	var res struct {
		Processes []listedProcess `json:"processes"`
	}
	c.ok("process.list", args, &res)
	return res.Processes
}

// TestReadOnlyTokenCannotReadAnotherPrincipalsSecrets: bob, allowed only
// to read files and list processes, finds nothing that leads to alice's
// job (no process_id, args or cgroup), and cannot read the job's
// environment, nor the agent's, nor reach into the job's namespace through
// /proc/<pid>/root, by any file tool.
func TestReadOnlyTokenCannotReadAnotherPrincipalsSecrets(t *testing.T) {
	_, alice, bob := twoPrincipals(t, "files.read,files.list,files.search,process.list")
	const secret = "SECRET-9f3a1c77"
	id := alice.start(map[string]any{"command": "sleep 120", "env": map[string]string{"API_KEY": secret}}).ProcessID
	defer alice.stopAndWait(id)
	shell := alice.childPID(id)

	mine := processList(alice, map[string]any{"managed": true})
	if len(mine) == 0 || mine[0].ProcessID != id {
		t.Fatalf("alice does not see her own job's processes: %+v", mine)
	}
	if got := processList(bob, map[string]any{"managed": true}); len(got) != 0 {
		t.Errorf("bob's managed processes: %+v", got)
	}
	for _, p := range processList(bob, map[string]any{"pid": shell}) {
		if p.Managed || p.ProcessID != "" || p.Args != "" || p.Cgroup != "" {
			t.Errorf("bob sees alice's shell as %+v", p)
		}
	}
	if got := processList(bob, map[string]any{"cgroup": id}); len(got) != 0 {
		t.Errorf("bob finds alice's job by its cgroup: %+v", got)
	}

	pid := strconv.Itoa(shell)
	for _, call := range []struct {
		tool string
		args map[string]any
	}{
		{"files.read", map[string]any{"path": "/proc/" + pid + "/environ"}},
		{"files.read", map[string]any{"path": "/proc/self/environ"}},
		{"files.read", map[string]any{"path": "/dev/fd/../environ"}},
		{"files.read", map[string]any{"path": "/proc/" + pid + "/root/etc/hostname"}},
		{"files.list", map[string]any{"path": "/proc/" + pid + "/root"}},
		{"files.list", map[string]any{"path": "/proc/" + pid + "/cwd"}},
		{"files.search", map[string]any{"root": "/proc/" + pid, "text": secret}},
		{"files.search", map[string]any{"root": "/proc/" + pid + "/root/tmp", "text": secret}},
	} {
		if code, msg := bob.fail(call.tool, call.args); code != "permission_denied" || strings.Contains(msg, secret) {
			t.Errorf("bob's %s %v: %s %s", call.tool, call.args, code, msg)
		}
	}
	var found struct {
		Matches []struct {
			Path string `json:"path"`
		} `json:"matches"`
	}
	bob.ok("files.search", map[string]any{"root": "/proc", "text": secret, "timeout_ms": 20000}, &found)
	if len(found.Matches) != 0 {
		t.Errorf("a search of /proc finds the secret: %+v", found.Matches)
	}
	var meminfo struct {
		Data string `json:"data"`
	}
	bob.ok("files.read", map[string]any{"path": "/proc/meminfo"}, &meminfo)
	if !strings.Contains(meminfo.Data, "MemTotal") {
		t.Errorf("/proc/meminfo: %q", meminfo.Data)
	}
}

// TestMakeDirsCannotDisableTheDevice: a files.write with make_dirs through
// /dev/fd/../.. into the config directory is refused and creates nothing,
// so every later call of every principal still works.
func TestMakeDirsCannotDisableTheDevice(t *testing.T) {
	e, alice, bob := twoPrincipals(t, "files.write")
	ceiling := filepath.Join(e.agentConfig, "permissions.json")
	for _, p := range []string{"/dev/fd/../.." + ceiling + "/x", "/proc/self/cwd/../../.." + ceiling + "/x"} {
		if code, _ := bob.fail("files.write", map[string]any{"path": p, "content": "x", "make_dirs": true}); code != "permission_denied" {
			t.Errorf("write %s: %s", p, code)
		}
	}
	if _, err := os.Lstat(ceiling); !os.IsNotExist(err) {
		t.Errorf("the refused write left something at permissions.json: %v", err)
	}
	waitOnline(t, alice, nil)
	if raw, isErr := alice.call("process.jobs", nil); isErr {
		t.Fatalf("alice's next call fails: %s", raw)
	}
	dir := t.TempDir()
	bob.ok("files.write", map[string]any{"path": dir + "/a/b/f", "content": "x", "make_dirs": true}, nil)
	if b, err := os.ReadFile(dir + "/a/b/f"); err != nil || string(b) != "x" {
		t.Errorf("make_dirs elsewhere: %q %v", b, err)
	}
}

// TestHardLinkToTheIdentityIsRefused: a hard link to the device's
// identity made outside the agent's directories is refused as the identity
// itself, and a search does not read it.
func TestHardLinkToTheIdentityIsRefused(t *testing.T) {
	e, _, bob := twoPrincipals(t, "files.read,files.search,files.write,files.edit")
	dir := t.TempDir()
	link := filepath.Join(dir, "notes.json")
	if err := os.Link(filepath.Join(e.agentConfig, "identity.json"), link); err != nil {
		t.Skipf("no hard link across these directories: %v", err)
	}
	for _, call := range []struct {
		tool string
		args map[string]any
	}{
		{"files.read", map[string]any{"path": link}},
		{"files.write", map[string]any{"path": link, "content": "x", "mode": "append"}},
		{"files.edit", map[string]any{"path": link, "edits": []map[string]any{{"old_text": "{", "new_text": "["}}}},
	} {
		if code, _ := bob.fail(call.tool, call.args); code != "permission_denied" {
			t.Errorf("%s of a link to the identity: %s", call.tool, code)
		}
	}
	var found struct {
		Matches []struct {
			Path string `json:"path"`
		} `json:"matches"`
	}
	bob.ok("files.search", map[string]any{"root": dir, "text": "token"}, &found)
	if len(found.Matches) != 0 {
		t.Errorf("a search reads the identity through its link: %+v", found.Matches)
	}
}

// TestReplacingKeepsAttributes: overwrite and edit through the relay keep
// a file's mode 0000, a user. extended attribute and its ACL.
func TestReplacingKeepsAttributes(t *testing.T) {
	_, alice := onlineDevice(t)
	for _, tool := range []string{"files.write", "files.edit"} {
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, []byte("old\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(path, "user.origin", []byte("kept"), 0); err != nil {
			t.Skipf("no user xattrs here: %v", err)
		}
		if err := unix.Setxattr(path, "system.posix_acl_access", testkit.AccessACL(4242), 0); err != nil {
			t.Skipf("no ACLs here: %v", err)
		}
		os.Chmod(path, 0)
		acl := testkit.Xattr(t, path, "system.posix_acl_access")
		args := map[string]any{"path": path, "content": "new\n", "mode": "overwrite"}
		if tool == "files.edit" {
			args = map[string]any{"path": path, "edits": []map[string]any{{"old_text": "old", "new_text": "new"}}}
		}
		alice.ok(tool, args, nil)
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0 {
			t.Errorf("%s: mode %v (%v), want 0000", tool, fi.Mode(), err)
		}
		if v := testkit.Xattr(t, path, "user.origin"); string(v) != "kept" {
			t.Errorf("%s: user.origin %q", tool, v)
		}
		if v := testkit.Xattr(t, path, "system.posix_acl_access"); string(v) != string(acl) {
			t.Errorf("%s: the ACL is lost: %x, was %x", tool, v, acl)
		}
		if b, _ := os.ReadFile(path); string(b) != "new\n" {
			t.Errorf("%s: content %q", tool, b)
		}
	}
}

// TestListingDescriptorsStayWithTheAgent: commands process.run starts
// while files.list reads directories inherit none of them.
func TestListingDescriptorsStayWithTheAgent(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	root := t.TempDir()
	for i := range 300 {
		d := filepath.Join(root, "d"+strconv.Itoa(i))
		os.Mkdir(d, 0o755)
		os.WriteFile(filepath.Join(d, "f"), nil, 0o644)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.call("files.list", map[string]any{"path": root, "depth": 2, "max_entries": 10000})
		}
	})
	defer func() { close(stop); wg.Wait() }()
	var run struct {
		Stdout struct {
			Data string `json:"data"`
		} `json:"stdout"`
	}
	for deadline, n := time.Now().Add(8*time.Second), 0; n < 200 && time.Now().Before(deadline); n++ {
		c.ok("process.run", map[string]any{"command": "ls -l /proc/self/fd/"}, &run)
		if strings.Contains(run.Stdout.Data, root) {
			t.Fatalf("a command inherited a directory files.list was reading:\n%s", run.Stdout.Data)
		}
	}
}

// TestNoFileCallReadsWithoutBound: a file over the hash bound is read for
// its window only (sha256 null, and why), and an edit's search for the
// text nearest a missing old_text stops at its bound and says so.
func TestNoFileCallReadsWithoutBound(t *testing.T) {
	c := newClient(t, t.TempDir(), nil)
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("head\n")
	f.WriteAt([]byte("tail"), 64<<20+1) // sparse: past the bound unwritten
	f.Close()
	var r struct {
		Data    string  `json:"data"`
		SHA256  *string `json:"sha256"`
		Skipped string  `json:"sha256_skipped"`
		Size    int64   `json:"size"`
	}
	c.ok("files.read", map[string]any{"path": big, "max_bytes": 5}, &r)
	if r.Data != "head\n" || r.SHA256 != nil || !strings.Contains(r.Skipped, "67108864") || r.Size != 64<<20+5 {
		t.Errorf("a read of a file over the bound: %+v", r)
	}
	lines := filepath.Join(dir, "lines")
	if err := os.WriteFile(lines, []byte(strings.Repeat("a\n", 200_000)), 0o644); err != nil {
		t.Fatal(err)
	}
	raw, isErr := c.call("files.edit", map[string]any{"path": lines, "edits": []map[string]any{{"old_text": strings.Repeat("a\n", 30) + strings.Repeat("z", 200), "new_text": "x"}}})
	if !isErr || !strings.Contains(string(raw), `"near_search_bounded":true`) {
		t.Errorf("an edit whose near search is quadratic: %s", raw)
	}
}

// TestSearchSwapsLeadNowhere: directories swapped for symlinks to the
// agent's state directory while files.search walks them (between the
// listing of a directory and the opening of its entries) never lead the
// search into it, though the names inside match; the search still finds
// the text in the tree.
func TestSearchSwapsLeadNowhere(t *testing.T) {
	state := t.TempDir()
	const marker = "MARKER-c0ffee-2d41"
	if err := os.MkdirAll(filepath.Join(state, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "sub", "f"), []byte(marker+" planted\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, state, nil)
	root := t.TempDir()
	const dirs = 40
	for i := range dirs {
		d := filepath.Join(root, "d"+strconv.Itoa(i))
		os.MkdirAll(filepath.Join(d, "sub"), 0o755)
		os.WriteFile(filepath.Join(d, "sub", "f"), []byte(marker+" tree\n"), 0o644)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			d := filepath.Join(root, "d"+strconv.Itoa(i%dirs))
			os.Rename(d, d+".real")
			os.Symlink(state, d)
			time.Sleep(100 * time.Microsecond)
			os.Remove(d)
			os.Rename(d+".real", d)
		}
	})
	defer func() { close(stop); wg.Wait() }()
	var res struct {
		Matches []struct {
			Path string `json:"path"`
			Text string `json:"text"`
		} `json:"matches"`
	}
	found := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		c.ok("files.search", map[string]any{"root": root, "text": marker}, &res)
		for _, m := range res.Matches {
			if !strings.HasPrefix(m.Path, root+"/") || strings.Contains(m.Text, "planted") {
				t.Fatalf("a search through a swapped directory read the agent's file as %s: %q", m.Path, m.Text)
			}
		}
		found += len(res.Matches)
	}
	if found == 0 {
		t.Fatal("no search found the text in the tree")
	}
}
