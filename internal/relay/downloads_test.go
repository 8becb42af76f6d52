package relay

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/announce"
	"github.com/commandcore/commandcore/internal/relay/downloads"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// TestDownloadsAreBoundedApart: downloads in progress hold no slot of
// MaxUnauthenticated, and beyond limits.DownloadsConcurrent the next is
// answered 503 at once, while other requests are still served.
func TestDownloadsAreBoundedApart(t *testing.T) {
	entered, release := make(chan struct{}, limits.DownloadsConcurrent), make(chan struct{})
	h := newHarness(t, func(s *Server) {
		s.Downloads = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			<-release
			io.WriteString(w, "binary")
		})
	})
	done := make(chan int, limits.DownloadsConcurrent)
	for range limits.DownloadsConcurrent {
		go func() {
			res, err := http.Get(h.hs.URL + downloads.FilePrefix + "x")
			if err != nil {
				done <- 0
				return
			}
			res.Body.Close()
			done <- res.StatusCode
		}()
	}
	for range limits.DownloadsConcurrent {
		select {
		case <-entered:
		case <-time.After(20 * time.Second):
			t.Fatal("the downloads never began")
		}
	}
	if n := len(h.srv.gates.unauthenticated); n != 0 {
		t.Errorf("%d slots of requests without a credential held by downloads", n)
	}
	res, err := http.Get(h.hs.URL + downloads.ScriptPath)
	if err != nil || res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a download past the bound: %v %v", res, err)
	}
	res.Body.Close()
	if status, body := postEnroll(t, h.hs.URL, "ccE-AAAAAAAAAAAAAAAAAAAA", "box"); status != http.StatusForbidden {
		t.Errorf("an enrollment beside the downloads: %d %s", status, body)
	}
	close(release)
	for range limits.DownloadsConcurrent {
		if code := <-done; code != http.StatusOK {
			t.Errorf("a download: %d", code)
		}
	}
}

// TestNoDownloadsUnlessSet: a relay without Downloads serves none.
func TestNoDownloadsUnlessSet(t *testing.T) {
	h := newHarness(t, nil)
	for _, p := range []string{downloads.ScriptPath, downloads.FilePrefix + downloads.SumsName} {
		res, err := http.Get(h.hs.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d", p, res.StatusCode)
		}
	}
}

// TestServeServesDownloads: relay serve answers install.sh with its own
// URL in it, its own binary and the sums, without a token; a release
// directory it cannot serve refuses the start before anything is
// announced.
func TestServeServesDownloads(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var out strings.Builder
	if err := Serve(context.Background(), ServeConfig{State: st, Listen: "127.0.0.1:0", Out: &out, Downloads: t.TempDir()}); err == nil || !strings.Contains(err.Error(), downloads.SumsName) {
		t.Fatalf("an empty release directory: %v", err)
	}
	if out.Len() != 0 {
		t.Fatalf("announced %q before refusing", out.String())
	}
	dir := t.TempDir()
	sum := sha256.Sum256([]byte("deb"))
	os.WriteFile(filepath.Join(dir, "a.deb"), []byte("deb"), 0o644)
	os.WriteFile(filepath.Join(dir, downloads.SumsName), fmt.Appendf(nil, "%x  a.deb\n", sum), 0o644)
	base := serveInBackground(t, ServeConfig{State: st, Listen: "127.0.0.1:0", Downloads: dir})
	fetch := func(path string) string {
		t.Helper()
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, res.StatusCode, body)
		}
		return string(body)
	}
	if s := fetch(downloads.ScriptPath); !strings.Contains(s, "\nrelay='"+base+"'\n") {
		t.Errorf("install.sh does not name %s", base)
	}
	sums := fetch(downloads.FilePrefix + downloads.SumsName)
	exe, _ := os.Executable()
	self, _ := os.ReadFile(exe)
	for _, want := range []string{fmt.Sprintf("%x  a.deb\n", sum), fmt.Sprintf("%x  %s\n", sha256.Sum256(self), downloads.BinaryName(runtime.GOARCH))} {
		if !strings.Contains(sums, want) {
			t.Errorf("SHA256SUMS lacks %q:\n%s", want, sums)
		}
	}
	if got := fetch(downloads.FilePrefix + "a.deb"); got != "deb" {
		t.Errorf("a.deb: %q", got)
	}
}

// serveInBackground runs Serve until the test ends and returns its base
// URL.
func serveInBackground(t *testing.T, cfg ServeConfig) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	cfg.Out = w
	done := make(chan struct{})
	go func() {
		Serve(ctx, cfg)
		w.Close()
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })
	buf := make([]byte, 4096)
	n, _ := r.Read(buf)
	go io.Copy(io.Discard, r)
	base, ok := strings.CutPrefix(strings.SplitN(string(buf[:n]), "\n", 2)[0], announce.Listening)
	if !ok {
		t.Fatalf("Serve announced %q first", buf[:n])
	}
	return base
}
