package downloads

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/limits"
)

// get fetches path from h and returns the status and body.
func get(t *testing.T, h http.Handler, path string) (int, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.Bytes()
}

// release writes files into a new directory with their true SHA256SUMS,
// and returns it.
func release(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	var sums []Sum
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		sums = append(sums, Sum{Name: name, SHA256: sha256.Sum256([]byte(data))})
	}
	if err := os.WriteFile(filepath.Join(dir, SumsName), FormatSums(sums), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// self writes a stand-in for the relay's own binary.
func self(t *testing.T, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "commandcore")
	if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func newServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestServesOwnBinaryAndRelease: the relay's own binary under its
// architecture's name, the release's files, and SHA256SUMS over both that
// sha256sum --check accepts; the own binary as it was when the relay
// started, even once the file is replaced.
func TestServesOwnBinaryAndRelease(t *testing.T) {
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	if other == "" {
		other = "amd64"
	}
	dir := release(t, map[string]string{BinaryName(other): "the other binary", "commandcore_1.2.3_amd64.deb": "a deb"})
	exe := self(t, "the relay itself")
	s := newServer(t, Config{PublicURL: "https://relay.example:8440/", Dir: dir, Self: exe})
	// Replaced as an upgrade would: a new file under the old name.
	if err := os.WriteFile(exe+".new", []byte("a newer relay"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(exe+".new", exe); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{BinaryName(runtime.GOARCH): "the relay itself", BinaryName(other): "the other binary", "commandcore_1.2.3_amd64.deb": "a deb"} {
		code, body := get(t, s, FilePrefix+name)
		if code != http.StatusOK || string(body) != want {
			t.Errorf("%s: %d %q, want %q", name, code, body, want)
		}
		if err := os.WriteFile(filepath.Join(t.TempDir(), name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, sums := get(t, s, FilePrefix+SumsName)
	if code != http.StatusOK {
		t.Fatalf("SHA256SUMS: %d", code)
	}
	parsed, err := ParseSums(sums)
	if err != nil || len(parsed) != 3 {
		t.Fatalf("served SHA256SUMS %q: %v", sums, err)
	}
	if want := fmt.Sprintf("%x  %s\n", sha256.Sum256([]byte("the relay itself")), BinaryName(runtime.GOARCH)); !strings.Contains(string(sums), want) {
		t.Errorf("SHA256SUMS lacks %q:\n%s", want, sums)
	}
	code, script := get(t, s, ScriptPath)
	if code != http.StatusOK || !bytes.Contains(script, []byte("relay='https://relay.example:8440'\n")) || bytes.Contains(script, []byte(urlMark)) {
		t.Errorf("install.sh: %d, without the relay's URL:\n%s", code, script)
	}
}

// TestReleaseNamesOwnArchitecture: a release's binary for the relay's own
// architecture is served instead of the relay's.
func TestReleaseNamesOwnArchitecture(t *testing.T) {
	dir := release(t, map[string]string{BinaryName(runtime.GOARCH): "the release's"})
	s := newServer(t, Config{PublicURL: "http://127.0.0.1:1", Dir: dir, Self: self(t, "the relay itself")})
	if code, body := get(t, s, FilePrefix+BinaryName(runtime.GOARCH)); code != http.StatusOK || string(body) != "the release's" {
		t.Fatalf("%d %q", code, body)
	}
}

// TestWrongSumsServedAsGiven: the relay serves the release's SHA256SUMS as
// it is; the device checks it.
func TestWrongSumsServedAsGiven(t *testing.T) {
	dir := release(t, map[string]string{"commandcore-linux-riscv64": "x"})
	wrong := FormatSums([]Sum{{Name: "commandcore-linux-riscv64", SHA256: sha256.Sum256([]byte("y"))}})
	if err := os.WriteFile(filepath.Join(dir, SumsName), wrong, 0o644); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Config{PublicURL: "http://127.0.0.1:1", Dir: dir, Self: self(t, "me")})
	if _, sums := get(t, s, FilePrefix+SumsName); !bytes.Contains(sums, wrong) {
		t.Fatalf("served %q, want the release's line %q", sums, wrong)
	}
}

// TestNotFound: nothing outside what is listed is served, whatever the
// name.
func TestNotFound(t *testing.T) {
	dir := release(t, map[string]string{"a.deb": "a"})
	if err := os.WriteFile(filepath.Join(dir, "unlisted"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Config{PublicURL: "http://127.0.0.1:1", Dir: dir, Self: self(t, "me")})
	for _, p := range []string{FilePrefix + "unlisted", FilePrefix + "../downloads_test.go", FilePrefix + "", FilePrefix + ".", "/download", FilePrefix + "a.deb/", FilePrefix + "sub/a.deb", "/etc/passwd"} {
		if code, body := get(t, s, p); code != http.StatusNotFound {
			t.Errorf("%s: %d %q, want 404", p, code, body)
		}
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, ScriptPath, nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
}

// TestConditionalAndRange: a download carries its hash as ETag, and a
// client holding it gets 304; ranges work (a resumed download).
func TestConditionalAndRange(t *testing.T) {
	s := newServer(t, Config{PublicURL: "http://127.0.0.1:1", Self: self(t, "0123456789")})
	name := FilePrefix + BinaryName(runtime.GOARCH)
	req := httptest.NewRequest(http.MethodGet, name, nil)
	req.Header.Set("Range", "bytes=4-")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusPartialContent || rec.Body.String() != "456789" {
		t.Fatalf("range: %d %q", rec.Code, rec.Body)
	}
	etag := rec.Header().Get("ETag")
	if etag != fmt.Sprintf(`"%x"`, sha256.Sum256([]byte("0123456789"))) {
		t.Fatalf("ETag %q", etag)
	}
	req = httptest.NewRequest(http.MethodGet, name, nil)
	req.Header.Set("If-None-Match", etag)
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d", rec.Code)
	}
}

// TestRefusedDirectories: a release directory that cannot be served
// whole refuses the start, saying why.
func TestRefusedDirectories(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(dir string) error
		want  string
	}{
		{"no sums", func(dir string) error { return os.Remove(filepath.Join(dir, SumsName)) }, "no such file"},
		{"listed file missing", func(dir string) error { return os.Remove(filepath.Join(dir, "a.deb")) }, "no such file"},
		{"listed directory", func(dir string) error {
			os.Remove(filepath.Join(dir, "a.deb"))
			return os.Mkdir(filepath.Join(dir, "a.deb"), 0o755)
		}, "not a regular file"},
		{"listed outside", func(dir string) error {
			os.Remove(filepath.Join(dir, "a.deb"))
			return os.Symlink("/etc/passwd", filepath.Join(dir, "a.deb"))
		}, "escapes"},
		{"malformed", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, SumsName), []byte("nonsense\n"), 0o644)
		}, "line 1"},
		{"names itself", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, SumsName), FormatSums([]Sum{{Name: SumsName}}), 0o644)
		}, "names itself"},
		{"too large", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, SumsName), bytes.Repeat([]byte("\n"), limits.DownloadsMaxSumsBytes+1), 0o644)
		}, "over"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := release(t, map[string]string{"a.deb": "a"})
			if err := c.setup(dir); err != nil {
				t.Fatal(err)
			}
			_, err := New(Config{PublicURL: "http://127.0.0.1:1", Dir: dir, Self: self(t, "me")})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// TestTooManyFiles: a release of DownloadsMaxFiles files leaves no room
// for the relay's own binary.
func TestTooManyFiles(t *testing.T) {
	files := map[string]string{}
	for i := range limits.DownloadsMaxFiles {
		files[fmt.Sprintf("f%02d", i)] = "x"
	}
	dir := release(t, files)
	if _, err := New(Config{PublicURL: "http://127.0.0.1:1", Dir: dir, Self: self(t, "me")}); err == nil || !strings.Contains(err.Error(), "more than 64") {
		t.Fatalf("got %v", err)
	}
	// With the relay's own name among them, it fits.
	delete(files, "f00")
	files[BinaryName(runtime.GOARCH)] = "x"
	newServer(t, Config{PublicURL: "http://127.0.0.1:1", Dir: release(t, files), Self: self(t, "me")})
}

// TestMissingSelf: a relay whose own binary cannot be opened says so.
func TestMissingSelf(t *testing.T) {
	if _, err := New(Config{PublicURL: "http://127.0.0.1:1", Self: filepath.Join(t.TempDir(), "gone")}); err == nil || !strings.Contains(err.Error(), "own binary") {
		t.Fatalf("got %v", err)
	}
	// The default is the running executable.
	s := newServer(t, Config{PublicURL: "http://127.0.0.1:1"})
	exe, _ := os.Executable()
	data, _ := os.ReadFile(exe)
	if code, body := get(t, s, FilePrefix+BinaryName(runtime.GOARCH)); code != http.StatusOK || !bytes.Equal(body, data) {
		t.Fatalf("own binary: %d, %d bytes of %d", code, len(body), len(data))
	}
}

func TestScriptURL(t *testing.T) {
	for _, bad := range []string{"", "relay.example", "ftp://relay.example", "https://", "https://u:p@relay.example", "https://relay.example/?q=1",
		"https://relay.example/#f", "https://relay.example/'; rm -rf ~; '", "https://relay.example/a b", "https://relay.example/$(id)", "https://relay.example/?"} {
		if _, err := Script(bad); err == nil {
			t.Errorf("Script(%q) accepted", bad)
		}
		if _, err := New(Config{PublicURL: bad}); err == nil {
			t.Errorf("New with %q accepted", bad)
		}
	}
	for url, want := range map[string]string{"https://relay.example": "https://relay.example", "http://[::1]:8440/": "http://[::1]:8440", "https://relay.example/cc/": "https://relay.example/cc"} {
		s, err := Script(url)
		if err != nil || !bytes.Contains(s, []byte("\nrelay='"+want+"'\n")) {
			t.Errorf("Script(%q): %v", url, err)
		}
	}
	if got := InstallLine("https://relay.example/", "ccE-abc"); got != "curl --proto '=https' -fsSL https://relay.example/install.sh | COMMANDCORE_ENROLL_CODE=ccE-abc sh" {
		t.Errorf("InstallLine: %q", got)
	}
	if got := InstallLine("http://127.0.0.1:8440", "ccE-abc"); got != "curl -fsSL http://127.0.0.1:8440/install.sh | COMMANDCORE_ENROLL_CODE=ccE-abc sh" {
		t.Errorf("InstallLine: %q", got)
	}
}

// TestLinesKeepTheCodeOffCommandLines runs the install line and the enroll
// line as a shell does, every command they name a stub that records its
// arguments and what it finds in $COMMANDCORE_ENROLL_CODE: the code is in
// no command's arguments, and in the environment of the one command that
// needs it (the shell that runs install.sh, commandcore enroll) alone. An
// https line's curl is kept to https.
func TestLinesKeepTheCodeOffCommandLines(t *testing.T) {
	const code = "ccE-ABCDEFGHIJKLMNOPQRST"
	// The shells a person may paste it into, where this machine has them.
	shells := [][]string{{"/bin/sh", "-c"}}
	for _, sh := range [][]string{{"dash", "-c"}, {"bash", "-c"}, {"zsh", "-c"}, {"busybox", "sh", "-c"}} {
		if p, err := exec.LookPath(sh[0]); err == nil {
			shells = append(shells, append([]string{p}, sh[1:]...))
		}
	}
	for _, c := range []struct {
		line string
		// argv is each command's arguments, one a line; env, the code it
		// was given.
		argv, env map[string]string
	}{
		{InstallLine("https://relay.example", code),
			map[string]string{"curl": "--proto\n=https\n-fsSL\nhttps://relay.example/install.sh\n", "sh": ""},
			map[string]string{"curl": "", "sh": code}},
		{InstallLine("http://127.0.0.1:8440", code),
			map[string]string{"curl": "-fsSL\nhttp://127.0.0.1:8440/install.sh\n", "sh": ""},
			map[string]string{"curl": "", "sh": code}},
		{EnrollLine("https://r1.example,https://r2.example", code),
			map[string]string{"commandcore": "enroll\n--server\nhttps://r1.example,https://r2.example\n"},
			map[string]string{"commandcore": code}},
	} {
		for _, shell := range shells {
			stubs, log := t.TempDir(), t.TempDir()
			for name := range c.argv {
				stub := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done >" + log + "/" + name + ".argv\n" +
					"printf '%s' \"${COMMANDCORE_ENROLL_CODE-}\" >" + log + "/" + name + ".env\n"
				if err := os.WriteFile(filepath.Join(stubs, name), []byte(stub), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(shell[0], append(shell[1:], c.line)...)
			cmd.Env = []string{"PATH=" + stubs}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v %q: %v\n%s", shell, c.line, err, out)
			}
			for name, want := range c.argv {
				argv, _ := os.ReadFile(filepath.Join(log, name+".argv"))
				env, err := os.ReadFile(filepath.Join(log, name+".env"))
				if err != nil {
					t.Fatalf("%v %q: %s did not run", shell, c.line, name)
				}
				if string(argv) != want || string(env) != c.env[name] {
					t.Errorf("%v %q: %s ran with arguments %q and the code %q; want %q and %q", shell, c.line, name, argv, env, want, c.env[name])
				}
			}
		}
	}
}

// TestScriptCopyCurrent: install/install.sh, the copy people read in the
// repository, is the script served (go generate ./internal/relay/downloads).
func TestScriptCopyCurrent(t *testing.T) {
	copied, err := os.ReadFile("../../../install/install.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(copied, script) {
		t.Fatal("install/install.sh is stale; run: go generate ./internal/relay/downloads")
	}
	if !bytes.Contains(script, []byte("\nrelay="+urlMark+"\n")) {
		t.Fatalf("install.sh has no line relay=%s for the relay's URL", urlMark)
	}
}
