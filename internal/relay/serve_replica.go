package relay

import (
	"crypto/x509"
	"fmt"

	"github.com/commandcore/commandcore/internal/relay/downloads"
	"github.com/commandcore/commandcore/internal/relay/oauth"
	"github.com/commandcore/commandcore/internal/relay/updates"
	"github.com/commandcore/commandcore/internal/version"
)

// startReplica makes the replica on ls, with what it serves: the
// downloads (opened before it joins the others, so a release it cannot
// serve refuses the start), OAuth when the panel is served, and the
// agents' updates. It records the public URL for the administration
// commands' install lines (relay enroll-code).
func startReplica(cfg ServeConfig, ls *listeners, cas *x509.CertPool) (*Server, *downloads.Server, error) {
	public := cfg.PublicURL
	if public == "" {
		public = cfg.Replica.Address
	}
	dl, err := downloads.New(downloads.Config{PublicURL: public, Dir: cfg.Downloads})
	if err != nil {
		return nil, nil, err
	}
	srv, err := configureReplica(cfg, ls, cas, public, dl)
	if err != nil {
		dl.Close()
		return nil, nil, err
	}
	return srv, dl, nil
}

// configureReplica makes the replica and sets what it serves.
func configureReplica(cfg ServeConfig, ls *listeners, cas *x509.CertPool, public string, dl *downloads.Server) (*Server, error) {
	recorded := ""
	if cfg.PublicURL != "" {
		recorded, _ = oauth.CheckPublicURL(cfg.PublicURL)
	}
	if err := cfg.State.SetPublicURL(recorded); err != nil {
		return nil, fmt.Errorf("record the public URL: %w", err)
	}
	srv, err := NewReplica(cfg.State, cfg.Replica)
	if err != nil {
		return nil, err
	}
	srv.Log = cfg.Log
	srv.MaxCallWait = cfg.MaxCallWait
	srv.SetTrustedProxies(cfg.TrustedProxies)
	srv.SetAllowedOrigins(public, cfg.AllowedOrigins)
	if ls.panel != nil {
		oc := OAuthConfig{PublicURL: public, PanelURL: cfg.PanelPublicURL, PrivateClients: cfg.OAuthPrivateClients, ClientCAs: cas}
		if oc.PanelURL == "" {
			oc.PanelURL = cfg.Replica.Panel + "/panel/"
		}
		if err := srv.SetOAuth(oc); err != nil {
			srv.Close()
			return nil, err
		}
	}
	srv.Downloads = dl
	cat, err := updates.New(updates.Config{Mode: cfg.AgentUpdates, Version: version.Version, Dir: cfg.Downloads, Sums: dl.Sums})
	if err != nil {
		srv.Close()
		return nil, err
	}
	srv.Updates = cat
	return srv, nil
}
