package cli

import (
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/enrollment"
	"github.com/commandcore/commandcore/internal/relay/downloads"
)

// TestEnrollFollowsNoRedirect: a server that redirects the enrollment
// elsewhere is refused, and the code never reaches the other server.
func TestEnrollFollowsNoRedirect(t *testing.T) {
	var reached atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		http.Error(w, "{}", http.StatusOK)
	}))
	defer other.Close()
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+r.URL.Path, status)
		}))
		cfg := t.TempDir()
		code, out, errOut := runMain("enroll", "--server", redirector.URL, "--code", "ccE-AAAAAAAAAAAAAAAAAAAA", "--name", "box",
			"--config-dir", cfg, "--state-dir", t.TempDir())
		redirector.Close()
		if code != ExitFailure || !strings.Contains(errOut, "redirect") || strings.Contains(out+errOut, "AAAAAAAA") {
			t.Errorf("%d: exit %d, stdout %q, stderr %q", status, code, out, errOut)
		}
		if _, err := os.Stat(filepath.Join(cfg, "identity.json")); err == nil {
			t.Errorf("%d: an identity was stored", status)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the redirect target got %d requests", n)
	}
}

func TestEnrollRefusesDeviceNamesShapedLikeIDs(t *testing.T) {
	for _, name := range []string{"0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a", "0F8E7D6C-5B4A-4392-8170-6F5E4D3C2B1A", "a b"} {
		code, _, errOut := runMain("enroll", "--server", "http://127.0.0.1:1", "--code", "ccE-AAAAAAAAAAAAAAAAAAAA", "--name", name,
			"--config-dir", t.TempDir(), "--state-dir", t.TempDir())
		if code != ExitUsage || !strings.Contains(errOut, "not shaped like a device ID") {
			t.Errorf("--name %q: exit %d, %q", name, code, errOut)
		}
	}
}

// saveIdentity stores an identity named name in configDir.
func saveIdentity(t *testing.T, configDir, name string) {
	t.Helper()
	key, err := authz.NewGrantKey()
	if err != nil {
		t.Fatal(err)
	}
	id := &enrollment.Credential{Schema: enrollment.Schema, Server: "https://relay.example", DeviceID: "0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a",
		Name: name, Token: "cdt_x", Secret: []byte("0123456789abcdef"), GrantKey: authz.EncodeGrantKey(key.Public().(ed25519.PublicKey)), EnrolledAt: time.Now().UTC()}
	if err := enrollment.Save(configDir, id); err != nil {
		t.Fatal(err)
	}
}

// TestEnrollKeepIdentity: with --keep-identity an existing identity is
// kept without a code or a server's answer; without one, a code is
// needed; --force contradicts it.
func TestEnrollKeepIdentity(t *testing.T) {
	t.Setenv(downloads.CodeEnv, "")
	cfg := t.TempDir()
	code, _, errOut := runMain("enroll", "--keep-identity", "--server", "http://127.0.0.1:1", "--config-dir", cfg, "--state-dir", t.TempDir())
	if code != ExitUsage || !strings.Contains(errOut, "not enrolled: enroll needs a code in $COMMANDCORE_ENROLL_CODE (or --code CODE)") {
		t.Fatalf("no identity, no code: exit %d, %q", code, errOut)
	}
	saveIdentity(t, cfg, "box")
	before, _ := os.ReadFile(filepath.Join(cfg, "identity.json"))
	// The server is unreachable: the identity is kept without asking it.
	code, out, errOut := runMain("enroll", "--keep-identity", "--server", "http://127.0.0.1:1", "--code", "ccE-AAAAAAAAAAAAAAAAAAAA", "--config-dir", cfg, "--state-dir", t.TempDir())
	if code != 0 || out != "Already enrolled as box (device 0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a) with https://relay.example; identity kept.\n" {
		t.Fatalf("an identity: exit %d, %q, %q", code, out, errOut)
	}
	if after, _ := os.ReadFile(filepath.Join(cfg, "identity.json")); string(after) != string(before) {
		t.Fatal("the identity changed")
	}
	if code, _, errOut := runMain("enroll", "--keep-identity", "--force", "--server", "http://127.0.0.1:1", "--code", "c", "--config-dir", cfg); code != ExitUsage || !strings.Contains(errOut, "contradict") {
		t.Fatalf("--keep-identity --force: exit %d, %q", code, errOut)
	}
}

// TestUninstallPurge: uninstall --purge removes the identity and leaves
// the owner's other files; without --purge the identity stays.
func TestUninstallPurge(t *testing.T) {
	// No user manager to reach and no unit installed: only the files.
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/commandcore-test-bus")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	cfg := t.TempDir()
	saveIdentity(t, cfg, "box")
	if code, out, errOut := runMain("uninstall", "--config-dir", cfg, "--state-dir", t.TempDir()); code != 0 || !strings.Contains(out, "not installed") {
		t.Fatalf("uninstall: exit %d, %q, %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(cfg, "identity.json")); err != nil {
		t.Fatalf("uninstall without --purge: %v", err)
	}
	os.WriteFile(filepath.Join(cfg, "permissions.json"), []byte("{}"), 0o600)
	code, out, errOut := runMain("uninstall", "--purge", "--config-dir", cfg, "--state-dir", t.TempDir())
	if code != 0 || !strings.Contains(out, "removed "+filepath.Join(cfg, "identity.json")+"\n") {
		t.Fatalf("uninstall --purge: exit %d, %q, %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(cfg, "identity.json")); !os.IsNotExist(err) {
		t.Fatalf("the identity is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg, "permissions.json")); err != nil {
		t.Fatalf("the owner's other file: %v", err)
	}
	// Nothing left to purge is no error.
	if code, _, errOut := runMain("uninstall", "--purge", "--config-dir", cfg, "--state-dir", t.TempDir()); code != 0 {
		t.Fatalf("a second uninstall --purge: exit %d, %q", code, errOut)
	}
}

// TestEnrollTakesTheCodeFromTheEnvironment: without --code, enroll sends
// the server the code in $COMMANDCORE_ENROLL_CODE, which keeps it off the
// command line; --code, when given, wins; with neither, enroll says where
// a code goes. The help says what --code shows.
func TestEnrollTakesTheCodeFromTheEnvironment(t *testing.T) {
	key, err := authz.NewGrantKey()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, err := enrollment.DecodeRequest(body)
		if r.URL.Path != enrollment.EnrollPath || err != nil {
			http.Error(w, "{}", http.StatusBadRequest)
			return
		}
		got = append(got, req.Code)
		json.NewEncoder(w).Encode(enrollment.Response{DeviceID: "0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a", Name: req.Name, Token: "cdt_x",
			Secret: []byte("0123456789abcdef"), GrantKey: authz.EncodeGrantKey(key.Public().(ed25519.PublicKey))})
	}))
	defer server.Close()

	t.Setenv(downloads.CodeEnv, "ccE-FROMTHEENVIRONMENT22")
	cfg := t.TempDir()
	code, out, errOut := runMain("enroll", "--server", server.URL, "--name", "box", "--config-dir", cfg, "--state-dir", t.TempDir())
	if code != 0 || !strings.HasPrefix(out, "Enrolled as box (device 0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a)") {
		t.Fatalf("exit %d, %q, %q", code, out, errOut)
	}
	if _, err := enrollment.Load(cfg); err != nil {
		t.Fatalf("no identity stored: %v", err)
	}
	code, _, errOut = runMain("enroll", "--server", server.URL, "--code", "ccE-FROMTHECOMMANDLINE2", "--name", "box", "--config-dir", t.TempDir(), "--state-dir", t.TempDir())
	if code != 0 {
		t.Fatalf("--code: exit %d, %q", code, errOut)
	}
	if want := []string{"ccE-FROMTHEENVIRONMENT22", "ccE-FROMTHECOMMANDLINE2"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the server got the codes %q, want %q", got, want)
	}

	t.Setenv(downloads.CodeEnv, "")
	code, _, errOut = runMain("enroll", "--server", server.URL, "--config-dir", t.TempDir(), "--state-dir", t.TempDir())
	if code != ExitUsage || !strings.Contains(errOut, "enroll needs --server URL and a code in $COMMANDCORE_ENROLL_CODE (or --code CODE)") || len(got) != 2 {
		t.Fatalf("no code: exit %d, %q, %d requests", code, errOut, len(got))
	}
	_, help, _ := runMain("enroll", "--help")
	for _, want := range []string{"COMMANDCORE_ENROLL_CODE=ccE-... commandcore enroll --server https://relay.example", "other local users can read it in the process list"} {
		if !strings.Contains(help, want) {
			t.Errorf("the help lacks %q:\n%s", want, help)
		}
	}
}
