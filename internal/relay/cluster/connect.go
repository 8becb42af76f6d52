package cluster

import (
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/commandcore/commandcore/internal/errcode"
)

// Options are how a replica reaches the NATS server: the URL (one or more,
// comma-separated; user and password, or a token, may ride in it as NATS
// takes them) and the operator's credentials and TLS.
type Options struct {
	URL string
	// Creds is a .creds file (JWT and NKey seed); NKey an NKey seed file.
	Creds, NKey string
	// CA verifies the server's certificate (TLS on); Cert and Key are a
	// client certificate, for a server that asks for one.
	CA, Cert, Key string
	// Insecure allows plain NATS to an address off loopback: the operator
	// says the network between the replicas is trusted.
	Insecure bool
}

// ErrPlainOffLoopback refuses plain NATS off loopback (Options.Check).
var ErrPlainOffLoopback = errcode.New(errcode.InvalidArgument,
	"--nats names a server off loopback without TLS; use tls://, --nats-ca, or --nats-insecure if the network between the replicas is trusted")

// Check refuses, before any connection is tried, a URL NATS would not
// take, and a plain URL to a server off loopback unless Insecure. Its
// errors never repeat a URL, which may hold credentials.
func (o Options) Check() error {
	tlsOn := o.CA != "" || o.Cert != ""
	if (o.Cert == "") != (o.Key == "") {
		return errcode.New(errcode.InvalidArgument, "--nats-cert and --nats-key go together")
	}
	for _, raw := range strings.Split(o.URL, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Host == "" {
			return errcode.New(errcode.InvalidArgument, "--nats must be nats://HOST:PORT or tls://HOST:PORT (several separated by commas)")
		}
		switch u.Scheme {
		case "tls":
		case "nats":
			if !tlsOn && !o.Insecure && !loopback(u.Hostname()) {
				return ErrPlainOffLoopback
			}
		default:
			return errcode.New(errcode.InvalidArgument, "--nats must be nats://HOST:PORT or tls://HOST:PORT (several separated by commas)")
		}
	}
	return nil
}

// loopback reports whether host is this machine by its name alone: no
// name is looked up, so a check never reaches a resolver.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Connect dials the NATS server as replica name, after Check, reconnecting
// for as long as the replica runs once it has connected.
func Connect(o Options, name string) (*nats.Conn, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.Name("commandcore relay " + name), nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond), nats.Timeout(5 * time.Second)}
	if o.Creds != "" {
		opts = append(opts, nats.UserCredentials(o.Creds))
	}
	if o.NKey != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKey)
		if err != nil {
			return nil, errcode.New(errcode.InvalidArgument, "--nats-nkey is not a readable NKey seed file")
		}
		opts = append(opts, opt)
	}
	if o.CA != "" {
		opts = append(opts, nats.RootCAs(o.CA))
	}
	if o.Cert != "" {
		opts = append(opts, nats.ClientCert(o.Cert, o.Key))
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "cannot reach NATS at --nats")
	}
	return nc, nil
}
