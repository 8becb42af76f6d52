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

	"github.com/commandcore/commandcore/internal/relayapi"
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

// Serve starts `bin relay serve` with args (e.g. --listen, --state-dir)
// and returns the running process and the base URL it announced. Its
// standard error goes to ours; the rest of its output is discarded. The
// caller stops the process.
func Serve(bin string, args ...string) (*exec.Cmd, string, error) {
	cmd, lines, err := serve(bin, 1, args)
	if err != nil {
		return nil, "", err
	}
	return cmd, lines[0], nil
}

// ServeMetrics is Serve with metrics on a free loopback port; it also
// returns the metrics' URL.
func ServeMetrics(bin string, args ...string) (cmd *exec.Cmd, url, metricsURL string, err error) {
	return ServeMetricsOn(bin, "127.0.0.1:0", args...)
}

// ServeMetricsOn is ServeMetrics with the metrics on listen.
func ServeMetricsOn(bin, listen string, args ...string) (cmd *exec.Cmd, url, metricsURL string, err error) {
	cmd, lines, err := serve(bin, 2, append(args, "--metrics-listen", listen))
	if err != nil {
		return nil, "", "", err
	}
	return cmd, lines[0], lines[1], nil
}

// serve starts the relay and reads the first n announcements.
func serve(bin string, n int, args []string) (*exec.Cmd, []string, error) {
	cmd := exec.Command(bin, append([]string{"relay", "serve"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	r := bufio.NewReader(out)
	var got []string
	for _, prefix := range []string{relayapi.AnnounceListening, relayapi.AnnounceMetrics}[:n] {
		line, err := r.ReadString('\n')
		v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix)
		if err != nil || !ok {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, nil, errors.Join(fmt.Errorf("relay's announcement %q", line), err)
		}
		got = append(got, v)
	}
	go io.Copy(io.Discard, r)
	return cmd, got, nil
}
