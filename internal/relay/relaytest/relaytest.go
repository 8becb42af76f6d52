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

	"github.com/commandcore/commandcore/internal/relay/announce"
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
	cmd, got, err := serve(bin, args, announce.Listening)
	if err != nil {
		return nil, "", err
	}
	return cmd, got[0], nil
}

// ServeMetrics is Serve with metrics on a free loopback port; it also
// returns the metrics' URL.
func ServeMetrics(bin string, args ...string) (cmd *exec.Cmd, url, metricsURL string, err error) {
	return ServeMetricsOn(bin, "127.0.0.1:0", args...)
}

// ServeMetricsOn is ServeMetrics with the metrics on listen.
func ServeMetricsOn(bin, listen string, args ...string) (cmd *exec.Cmd, url, metricsURL string, err error) {
	cmd, got, err := serve(bin, append(args, "--metrics-listen", listen), announce.Listening, announce.Metrics)
	if err != nil {
		return nil, "", "", err
	}
	return cmd, got[0], got[1], nil
}

// ServePanel is Serve with the web panel on a free loopback port; it also
// returns the panel's URL (ending in /panel/).
func ServePanel(bin string, args ...string) (cmd *exec.Cmd, url, panelURL string, err error) {
	return ServePanelLogged(bin, os.Stderr, args...)
}

// ServePanelLogged is ServePanel with the relay's standard error (its log)
// written to stderr.
func ServePanelLogged(bin string, stderr io.Writer, args ...string) (cmd *exec.Cmd, url, panelURL string, err error) {
	cmd, got, err := serveTo(bin, stderr, append(args, "--panel-listen", "127.0.0.1:0"), announce.Listening, announce.Panel)
	if err != nil {
		return nil, "", "", err
	}
	return cmd, got[0], got[1], nil
}

// serve starts the relay and reads its announcements until it has made
// each of prefixes (in any order), and returns what followed each.
func serve(bin string, args []string, prefixes ...string) (*exec.Cmd, []string, error) {
	return serveTo(bin, os.Stderr, args, prefixes...)
}

// serveTo is serve with the relay's standard error going to stderr.
func serveTo(bin string, stderr io.Writer, args []string, prefixes ...string) (*exec.Cmd, []string, error) {
	cmd := exec.Command(bin, append([]string{"relay", "serve"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	r := bufio.NewReader(out)
	got := make([]string, len(prefixes))
	for missing := len(prefixes); missing > 0; {
		line, err := r.ReadString('\n')
		found := false
		for i, prefix := range prefixes {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok && got[i] == "" {
				got[i], found = v, true
				missing--
				break
			}
		}
		if err != nil || !found {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, nil, errors.Join(fmt.Errorf("relay's announcement %q", line), err)
		}
	}
	go io.Copy(io.Discard, r)
	return cmd, got, nil
}
