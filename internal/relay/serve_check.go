package relay

import (
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/oauth"
)

// check refuses a configuration Serve cannot run, before anything is
// opened, and reads the client CAs it names.
func (cfg ServeConfig) check() (*x509.CertPool, error) {
	switch {
	case (cfg.TLSCert == "") != (cfg.TLSKey == ""):
		return nil, ErrTLSPair
	case cfg.MetricsToken != "" && cfg.MetricsListen == "":
		return nil, ErrMetricsTokenAlone
	case cfg.PanelListen == "" && (cfg.PanelPublicURL != "" || cfg.OAuthPrivateClients || cfg.OAuthClientCA != ""):
		return nil, ErrOAuthNeedsPanel
	case cfg.OIDC != nil && cfg.PanelListen == "":
		return nil, ErrSSONeedsPanel
	case cfg.MaxCallWait != 0 && (cfg.MaxCallWait < time.Second || cfg.MaxCallWait > limits.ForwardTimeout):
		return nil, ErrMaxCallWait
	}
	if cfg.PublicURL != "" {
		if _, err := oauth.CheckPublicURL(cfg.PublicURL); err != nil {
			return nil, err
		}
	}
	if cfg.PanelPublicURL != "" {
		if err := oauth.CheckPanelURL(cfg.PanelPublicURL); err != nil {
			return nil, err
		}
	}
	// Checked now; set once the relay is made.
	if _, err := parseOrigins(cfg.AllowedOrigins); err != nil {
		return nil, err
	}
	if err := new(Server).SetTrustedProxies(cfg.TrustedProxies); err != nil {
		return nil, err
	}
	return clientCAs(cfg.OAuthClientCA)
}

// clientCAs reads the PEM file of CAs a client ID metadata document's
// certificate may chain to, with the system's; "" is the system's alone.
func clientCAs(file string) (*x509.CertPool, error) {
	if file == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, ErrClientCA
	}
	return pool, nil
}
