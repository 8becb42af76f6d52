package relay

import (
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/announce"
)

// listeners are a replica's: the MCP, enrollment and agent endpoints', and
// the panel's and the metrics' when configured.
type listeners struct {
	main, panel, metrics net.Listener
}

// listen opens cfg's listeners and records in cfg.Replica the addresses
// they bound. The metrics' listener comes first, so a refusal comes
// before anything is served or announced.
func listen(cfg *ServeConfig) (*listeners, error) {
	ls := &listeners{}
	var err error
	if cfg.MetricsListen != "" {
		if ls.metrics, err = listenMetrics(cfg.MetricsListen, cfg.MetricsToken); err != nil {
			return nil, err
		}
	}
	if cfg.PanelListen != "" {
		if ls.panel, err = listenPanel(*cfg); err != nil {
			ls.close()
			return nil, err
		}
		cfg.Replica.Panel = baseURL(*cfg, ls.panel)
	}
	if ls.main, err = net.Listen("tcp", cfg.Listen); err != nil {
		ls.close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	cfg.Replica.Address = baseURL(*cfg, ls.main)
	return ls, nil
}

// close closes every listener opened.
func (ls *listeners) close() {
	for _, l := range []net.Listener{ls.main, ls.panel, ls.metrics} {
		if l != nil {
			l.Close()
		}
	}
}

// listenPanel opens the panel's listener, refusing plain HTTP off
// loopback (judged by the address bound) unless cfg.PanelInsecure.
func listenPanel(cfg ServeConfig) (net.Listener, error) {
	ln, err := net.Listen("tcp", cfg.PanelListen)
	if err != nil {
		return nil, fmt.Errorf("listen for the panel: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); cfg.TLSCert == "" && !cfg.PanelInsecure && (!ok || !tcp.IP.IsLoopback()) {
		ln.Close()
		return nil, fmt.Errorf("%s is not a loopback address: %w", cfg.PanelListen, ErrPanelPlainHTTP)
	}
	return ln, nil
}

// listenMetrics opens the metrics' listener at addr, judging loopback by
// the address bound, so a name that resolves elsewhere is caught too.
func listenMetrics(addr, token string) (net.Listener, error) {
	if token != "" && len(token) < limits.MetricsTokenMinBytes {
		return nil, ErrMetricsTokenShort
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); token == "" && (!ok || !tcp.IP.IsLoopback()) {
		ln.Close()
		return nil, fmt.Errorf("%s is not a loopback address: %w", addr, ErrMetricsNeedToken)
	}
	return ln, nil
}

// announceListening says where the relay listens, warning first when it serves
// plain HTTP where agents will refuse it, and returns its base URL.
func announceListening(cfg ServeConfig, ln net.Listener) string {
	base := baseURL(cfg, ln)
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && cfg.TLSCert == "" && !tcp.IP.IsLoopback() && cfg.Warn != nil {
		fmt.Fprintln(cfg.Warn, "relay: warning: serving plain HTTP on a non-loopback address; agents and clients elsewhere need --tls-cert and --tls-key")
	}
	fmt.Fprintf(cfg.Out, "%s%s\n", announce.Listening, base)
	return base
}

// baseURL is the relay's base URL on ln.
func baseURL(cfg ServeConfig, ln net.Listener) string {
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	return scheme + "://" + ln.Addr().String()
}

// panelURL is the panel's public origin: PanelPublicURL's, else its
// listener's, by the name localhost on loopback (passkeys need a host
// name, and browsers count localhost as secure).
func panelURL(cfg ServeConfig, ln net.Listener) *url.URL {
	if u, err := url.Parse(cfg.PanelPublicURL); cfg.PanelPublicURL != "" && err == nil {
		return &url.URL{Scheme: u.Scheme, Host: u.Host}
	}
	u, _ := url.Parse(baseURL(cfg, ln))
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		u.Host = net.JoinHostPort("localhost", strconv.Itoa(tcp.Port))
	}
	return u
}
