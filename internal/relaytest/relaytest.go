// Package relaytest starts the reference relay for end-to-end tests and
// benchmarks, and gives their MCP clients the bearer token it asks for.
// Only tests import it.
package relaytest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
)

// Bearer is an http.RoundTripper that adds a client token to every request.
type Bearer struct{ Token string }

// RoundTrip implements http.RoundTripper.
func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	return http.DefaultTransport.RoundTrip(r)
}

// HTTPClient returns a client that sends token with every request.
func HTTPClient(token string) *http.Client {
	return &http.Client{Transport: Bearer{token}}
}

// listening is how `relay serve` announces its address on its first line.
const listening = "relay: listening on "

// Serve starts `bin relay serve` with args (e.g. --listen, --state-dir)
// and returns the running process and the base URL it announced. Its
// standard error goes to ours; the rest of its output is discarded. The
// caller stops the process.
func Serve(bin string, args ...string) (*exec.Cmd, string, error) {
	cmd := exec.Command(bin, append([]string{"relay", "serve"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), listening)
	if err != nil || !ok {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, "", errors.Join(fmt.Errorf("relay's first line %q", line), err)
	}
	go io.Copy(io.Discard, r)
	return cmd, url, nil
}
