package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
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
