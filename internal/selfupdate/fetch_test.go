package selfupdate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// zeros reads as n zero bytes.
func zeros(n int64) io.Reader { return io.LimitReader(zeroReader{}, n) }

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// The contract: an update downloads at most 256 MiB. A binary of exactly
// that size is taken; one byte more is refused even when its SHA-256 is
// the offer's, and leaves nothing behind.
func TestFetchTakesAtMost256MiB(t *testing.T) {
	const max = 256 << 20
	h := sha256.New()
	io.Copy(h, zeros(max))
	atMax := hex.EncodeToString(h.Sum(nil))
	h.Write([]byte{0})
	overMax := hex.EncodeToString(h.Sum(nil))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, DownloadPath+"zeros-"), 10, 64)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		io.Copy(w, zeros(n))
	}))
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	path, err := Fetch(context.Background(), srv.Client(), srv.URL, Offer{Version: "1.2.0", SHA256: atMax, Name: "zeros-" + strconv.Itoa(max)}, dir)
	if err != nil {
		t.Fatalf("a binary of exactly 256 MiB: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != max {
		t.Fatalf("fetched %v, %v", fi, err)
	}
	os.Remove(path)

	_, err = Fetch(context.Background(), srv.Client(), srv.URL, Offer{Version: "1.2.0", SHA256: overMax, Name: "zeros-" + strconv.Itoa(max+1)}, dir)
	if err == nil || errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "over 268435456 bytes") {
		t.Errorf("a binary of 256 MiB and one byte: %v, want over 268435456 bytes", err)
	}
	if names := entries(t, dir); len(names) != 0 {
		t.Errorf("a refused download left %v", names)
	}
}

// A download cut short is an error, and leaves nothing behind.
func TestFetchOfATruncatedDownloadFails(t *testing.T) {
	want := []byte("the whole binary")
	sum := sha256.Sum256(want)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(want)))
		w.Write(want[:5])
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	_, err := Fetch(context.Background(), srv.Client(), srv.URL, Offer{Version: "1.2.0", SHA256: hex.EncodeToString(sum[:]), Name: "commandcore"}, dir)
	if err == nil || errors.Is(err, ErrMismatch) {
		t.Errorf("a download cut short: %v", err)
	}
	if names := entries(t, dir); len(names) != 0 {
		t.Errorf("a failed download left %v", names)
	}
}

// An offer whose SHA-256 is not 64 hex digits, or a relay URL that is not
// http or https, is refused before the relay is asked for anything.
func TestFetchRefusesBeforeAsking(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Write([]byte("new"))
	}))
	t.Cleanup(srv.Close)
	sum := sha256.Sum256([]byte("new"))
	good := Offer{Version: "1.2.0", SHA256: hex.EncodeToString(sum[:]), Name: "commandcore"}
	for name, tc := range map[string]struct {
		server string
		sha    string
	}{
		"62 hex digits":  {srv.URL, good.SHA256[:62]},
		"66 hex digits":  {srv.URL, good.SHA256 + "00"},
		"not hex":        {srv.URL, "zz" + good.SHA256[2:]},
		"an ftp relay":   {strings.Replace(srv.URL, "http://", "ftp://", 1), good.SHA256},
		"no host":        {"http://", good.SHA256},
		"not a URL":      {"http://[::1", good.SHA256},
		"a relative URL": {"/relay", good.SHA256},
	} {
		o := good
		o.SHA256 = tc.sha
		dir := t.TempDir()
		if _, err := Fetch(context.Background(), srv.Client(), tc.server, o, dir); err == nil || errors.Is(err, ErrMismatch) {
			t.Errorf("%s: Fetch = %v", name, err)
		}
		if names := entries(t, dir); len(names) != 0 {
			t.Errorf("%s: left %v", name, names)
		}
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the relay was asked %d times", n)
	}
	if _, err := Fetch(context.Background(), srv.Client(), srv.URL, good, t.TempDir()); err != nil || asked.Load() != 1 {
		t.Errorf("the good offer: %v, relay asked %d times", err, asked.Load())
	}
}

// The download is the offer's name under the relay's /download/, beside
// any path the relay's URL has; its query and fragment are not the
// download's.
func TestDownloadURL(t *testing.T) {
	o := Offer{Name: "commandcore-linux-amd64"}
	for server, want := range map[string]string{
		"http://relay.example":               "http://relay.example/download/commandcore-linux-amd64",
		"https://relay.example/":             "https://relay.example/download/commandcore-linux-amd64",
		"https://relay.example:8443/cc//":    "https://relay.example:8443/cc/download/commandcore-linux-amd64",
		"https://relay.example/cc/?x=1#frag": "https://relay.example/cc/download/commandcore-linux-amd64",
		"http://127.0.0.1:7000":              "http://127.0.0.1:7000/download/commandcore-linux-amd64",
		"https://[2001:db8::1]/relay":        "https://[2001:db8::1]/relay/download/commandcore-linux-amd64",
	} {
		if got, err := DownloadURL(server, o); err != nil || got != want {
			t.Errorf("DownloadURL(%q) = %q, %v, want %q", server, got, err, want)
		}
	}
	for _, server := range []string{"ftp://relay.example", "file:///download", "relay.example", "https://", "http://[::1", ""} {
		if got, err := DownloadURL(server, o); err == nil {
			t.Errorf("DownloadURL(%q) = %q", server, got)
		}
	}
}
