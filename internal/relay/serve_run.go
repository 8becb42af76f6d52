package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/commandcore/commandcore/internal/relay/announce"
	"github.com/commandcore/commandcore/internal/relay/metrics"
	"github.com/commandcore/commandcore/internal/relay/signin"
)

// serving is a replica's HTTP servers, one per listener, each serving in
// a goroutine of its own until one fails or the relay stops.
type serving struct {
	cfg        ServeConfig
	errc       chan error
	hs, ps, ms *http.Server
}

func newServing(cfg ServeConfig) *serving { return &serving{cfg: cfg, errc: make(chan error, 3)} }

// serve runs hs on ln, with the relay's TLS when it has one.
func (r *serving) serve(hs *http.Server, ln net.Listener) {
	go func() {
		if r.cfg.TLSCert != "" {
			r.errc <- hs.ServeTLS(ln, r.cfg.TLSCert, r.cfg.TLSKey)
		} else {
			r.errc <- hs.Serve(ln)
		}
	}()
}

// main serves the MCP, enrollment and agent endpoints.
func (r *serving) main(srv *Server, ln net.Listener) {
	r.hs = srv.HTTPServer()
	r.serve(r.hs, ln)
}

// panel serves the web panel, with its sign-in, and announces it.
func (r *serving) panel(srv *Server, ln net.Listener) error {
	var err error
	if srv.SignIn, err = signin.New(signin.Config{State: r.cfg.State, PanelURL: panelURL(r.cfg, ln), OIDC: r.cfg.OIDC, Now: srv.Now}); err != nil {
		return fmt.Errorf("panel sign-in: %w", err)
	}
	// Behind a TLS proxy the listener is plain HTTP, but browsers reach
	// the panel over HTTPS: its cookies are Secure either way.
	if r.ps, err = srv.PanelServer(r.cfg.TLSCert != "" || panelURL(r.cfg, ln).Scheme == "https"); err != nil {
		return fmt.Errorf("panel: %w", err)
	}
	r.serve(r.ps, ln)
	fmt.Fprintf(r.cfg.Out, "%s%s%s\n", announce.Panel, r.cfg.Replica.Panel, "/panel/")
	return nil
}

// metrics serves Prometheus metrics, over plain HTTP, and announces them.
func (r *serving) metrics(srv *Server, ln net.Listener) {
	m := metrics.New(srv, metrics.Labels{Tools: AuditTools(), EnrollRefusals: EnrollRefusals})
	srv.Observer = m
	r.ms = m.Server(r.cfg.MetricsToken)
	go func() { r.errc <- r.ms.Serve(ln) }()
	fmt.Fprintf(r.cfg.Out, "%shttp://%s%s\n", announce.Metrics, ln.Addr(), metrics.Path)
}

// wait serves until ctx ends or a server fails, then shuts down.
func (r *serving) wait(ctx context.Context, srv *Server) error {
	select {
	case err := <-r.errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	return r.shutdown(srv)
}

// shutdown ends the device links, then lets the calls drain; the metrics
// stay scrapable until they have.
func (r *serving) shutdown(srv *Server) error {
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if r.ps != nil {
		// Live pages stream until closed; they need not drain.
		r.ps.Close()
	}
	err := r.hs.Shutdown(ctx)
	if r.ms != nil {
		r.ms.Shutdown(ctx)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}
