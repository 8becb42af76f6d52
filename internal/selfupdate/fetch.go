package selfupdate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/commandcore/commandcore/internal/limits"
)

// DownloadPath is where a relay serves the files it offers.
const DownloadPath = "/download/"

// ErrMismatch reports a downloaded binary whose SHA-256 is not the offer's:
// nothing was replaced.
var ErrMismatch = errors.New("the downloaded binary's SHA-256 is not the one offered")

// DownloadURL is where server serves o.
func DownloadURL(server string, o Offer) (string, error) {
	u, err := url.Parse(strings.TrimRight(server, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("the relay's URL is not an http or https URL")
	}
	u.Path = strings.TrimRight(u.Path, "/") + DownloadPath + o.Name
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u.String(), nil
}

// Fetch downloads o from server into a new executable file in dir,
// hashing it as it comes, and returns the file's path once its SHA-256 is
// the offer's and it is on disk. On any failure nothing is left in dir.
// The download is at most limits.UpdateMaxBytes and takes at most
// limits.UpdateFetchTimeout.
func Fetch(ctx context.Context, client *http.Client, server string, o Offer, dir string) (path string, err error) {
	want, err := o.sum()
	if err != nil {
		return "", err
	}
	src, err := DownloadURL(server, o)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, limits.UpdateFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return "", fmt.Errorf("download the binary: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("download the binary: %w", errors.Unwrap(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("download the binary: the relay answered HTTP %d", resp.StatusCode)
	}
	f, err := os.CreateTemp(dir, ".commandcore.update-*")
	if err != nil {
		return "", fmt.Errorf("write the new binary: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(resp.Body, limits.UpdateMaxBytes+1))
	if err != nil {
		return "", fmt.Errorf("download the binary: %w", err)
	}
	if n > limits.UpdateMaxBytes {
		return "", fmt.Errorf("download the binary: over %d bytes", int64(limits.UpdateMaxBytes))
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return "", ErrMismatch
	}
	if err := f.Chmod(0o755); err != nil {
		return "", fmt.Errorf("write the new binary: %w", err)
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("write the new binary: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write the new binary: %w", err)
	}
	return filepath.Clean(f.Name()), nil
}
