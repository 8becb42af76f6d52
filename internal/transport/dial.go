package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/gorilla/websocket"

	"github.com/commandcore/commandcore/internal/limits"
)

// AgentPath is where the server accepts agent links.
const AgentPath = "/v1/agent"

// ErrUnauthorized is returned (wrapped) by Dial when the server answers the
// handshake with 401: it does not know the token.
var ErrUnauthorized = errors.New("link: the server refused the device credentials")

// ErrDeviceRefused is returned (wrapped) by Dial when the server answers
// the handshake with 403: it knows the device and refuses it (revoked, or
// compromised) until it is enrolled again.
var ErrDeviceRefused = errors.New("link: the server refuses this device until it is enrolled again")

// ErrBusy is returned (wrapped) by Dial when the server answers the
// handshake with 409 (device_busy): the device's existing link still
// answers, so another holder of these credentials is linked.
var ErrBusy = errors.New("link: the server has a live link for this device already")

// ErrInsecure is returned (wrapped) by AgentURL and Dial for a plain ws:// or
// http:// URL whose host is not a loopback address.
var ErrInsecure = errors.New("link: plain ws/http is allowed only for a loopback server")

// ParseServers reads a comma-separated list of server URLs (relay
// replicas, any of which serves the device): each as AgentURL accepts it,
// without a trailing slash, none twice, at least one and at most
// limits.MaxServers. Errors never repeat a URL.
func ParseServers(list string) ([]string, error) {
	var out []string
	for i, s := range strings.Split(list, ",") {
		s = strings.TrimRight(strings.TrimSpace(s), "/")
		if _, err := AgentURL(s); err != nil {
			return nil, fmt.Errorf("server %d: %w", i+1, err)
		}
		if slices.Contains(out, s) {
			return nil, fmt.Errorf("server %d: named twice", i+1)
		}
		out = append(out, s)
	}
	if len(out) > limits.MaxServers {
		return nil, fmt.Errorf("link: at most %d servers", limits.MaxServers)
	}
	return out, nil
}

// AgentURL returns the WebSocket URL of the agent endpoint for serverURL:
// http→ws, https→wss (ws and wss are kept), with AgentPath appended to any
// path prefix. Plain ws/http is refused (ErrInsecure) unless the host is a
// loopback address (127.0.0.0/8, ::1) or "localhost". URLs carrying user
// info, a query or a fragment are refused. Errors never repeat the URL.
func AgentURL(serverURL string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(serverURL))
	if err != nil {
		return "", errors.New("link: the server URL does not parse")
	}
	switch strings.ToLower(u.Scheme) {
	case "https", "wss":
		u.Scheme = "wss"
	case "http", "ws":
		u.Scheme = "ws"
	default:
		return "", errors.New("link: the server URL must be http, https, ws or wss")
	}
	if u.Opaque != "" || u.Host == "" || u.Hostname() == "" {
		return "", errors.New("link: the server URL has no host")
	}
	if u.User != nil {
		return "", errors.New("link: the server URL must not carry credentials")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", errors.New("link: the server URL must not carry a query or fragment")
	}
	if u.Scheme == "ws" && !IsLoopbackHost(u.Hostname()) {
		return "", ErrInsecure
	}
	u.Path = strings.TrimRight(u.Path, "/") + AgentPath
	u.RawPath = ""
	return u.String(), nil
}

// IsLoopbackHost reports whether host (no port, no brackets) is "localhost"
// or a loopback IP literal. Names other than "localhost" are not resolved.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Dial connects to SERVER/v1/agent with "Authorization: Bearer <token>".
// serverURL is http(s)://host[:port] or ws(s)://; http→ws, https→wss. Plain
// ws/http is allowed only when the host is a loopback address (127.0.0.0/8,
// ::1, "localhost"); otherwise an error wrapping ErrInsecure. A 401, 403 or
// 409 handshake response returns an error wrapping ErrUnauthorized,
// ErrDeviceRefused or ErrBusy. The
// handshake is bounded by ctx and by limits.SendTimeout; redirects are not
// followed. The token never appears in an error.
func Dial(ctx context.Context, serverURL, token string) (*websocket.Conn, error) {
	target, err := AgentURL(serverURL)
	if err != nil {
		return nil, err
	}
	if token == "" || strings.ContainsAny(token, "\r\n") {
		return nil, errors.New("link: the device token is empty or malformed")
	}
	d := websocket.Dialer{
		Proxy:            http.ProxyFromEnvironment,
		HandshakeTimeout: limits.SendTimeout,
		TLSClientConfig:  &tls.Config{MinVersion: tls.VersionTLS12},
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	h.Set(ArchHeader, runtime.GOARCH)
	ws, resp, err := d.DialContext(ctx, target, h)
	if err != nil {
		if resp != nil {
			switch resp.StatusCode {
			case http.StatusUnauthorized:
				return nil, fmt.Errorf("%w (HTTP %d)", ErrUnauthorized, resp.StatusCode)
			case http.StatusForbidden:
				return nil, fmt.Errorf("%w (HTTP %d)", ErrDeviceRefused, resp.StatusCode)
			case http.StatusConflict:
				return nil, fmt.Errorf("%w (HTTP %d)", ErrBusy, resp.StatusCode)
			}
			return nil, fmt.Errorf("link: the server refused the link (HTTP %d)", resp.StatusCode)
		}
		return nil, fmt.Errorf("link: dial: %w", err)
	}
	return ws, nil
}

// upgrader accepts agents' links. Agents are not browsers; there is no
// origin to check. Write buffers come from a pool for the time of a
// write, so an idle link holds none (gorilla would otherwise keep the
// request's 4 KiB write buffer for the link's life).
var upgrader = websocket.Upgrader{
	CheckOrigin:     func(*http.Request) bool { return true },
	WriteBufferPool: &sync.Pool{},
}

// Accept upgrades an agent's request for AgentPath to the server's end of a
// link (Server). On failure the request has been answered.
func Accept(w http.ResponseWriter, r *http.Request, secret []byte, opt Options) (*Conn, error) {
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return nil, err
	}
	return Server(ws, secret, opt), nil
}
