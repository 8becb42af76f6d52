package oauth

import (
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/commandcore/commandcore/internal/relay/store"
)

// blockedSchemes are never a redirect's: they run or show content rather
// than reach a client.
var blockedSchemes = []string{"javascript", "data", "vbscript", "file", "blob", "about", "filesystem"}

// ValidRedirectURI reports whether u may be a client's redirect URI: an
// absolute URL without fragment or user, HTTPS, plain HTTP to a loopback
// address only (a native app's, RFC 8252), or a private-use scheme of a
// native app.
func ValidRedirectURI(u string) bool {
	if u == "" || len(u) > store.MaxOAuthTextBytes || strings.ContainsAny(u, "# \\") {
		return false
	}
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" || p.User != nil || slices.Contains(blockedSchemes, p.Scheme) {
		return false
	}
	switch p.Scheme {
	case "https":
		return p.Hostname() != ""
	case "http":
		return loopbackHost(p.Hostname())
	}
	// A private-use scheme: "com.example.app:/callback" and the like.
	return p.Opaque != "" || p.Path != "" || p.Host != ""
}

// loopbackHost reports whether host is a loopback IP literal or
// localhost.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// matchRedirect reports whether given is one of registered: exactly, or,
// for a loopback HTTP redirect, with another port (RFC 8252: a native
// app listens on whatever port it was given).
func matchRedirect(registered []string, given string) bool {
	if !ValidRedirectURI(given) {
		return false
	}
	if slices.Contains(registered, given) {
		return true
	}
	g, err := url.Parse(given)
	if err != nil || g.Scheme != "http" || !loopbackHost(g.Hostname()) {
		return false
	}
	for _, r := range registered {
		p, err := url.Parse(r)
		if err != nil || p.Scheme != "http" || p.Hostname() != g.Hostname() {
			continue
		}
		if p.EscapedPath() == g.EscapedPath() && p.RawQuery == g.RawQuery && p.ForceQuery == g.ForceQuery && validPort(g.Port()) {
			return true
		}
	}
	return false
}

func validPort(p string) bool {
	if p == "" {
		return true
	}
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n <= 65535 && strings.Trim(p, "0123456789") == ""
}

// ResponseURL is the authorization response (RFC 6749 4.1.2, RFC 9207):
// the redirect URI with params added to its query, and iss. The consent
// page sends the browser there with a code (Approved) or an error
// (Denied); the authorization endpoint with its own errors.
func ResponseURL(redirectURI, issuer, state string, params url.Values) string {
	u, err := url.Parse(redirectURI)
	if err != nil {
		return redirectURI
	}
	q := u.Query()
	for k, vs := range params {
		q[k] = vs
	}
	if state != "" {
		q.Set("state", state)
	}
	q.Set("iss", issuer)
	u.RawQuery = q.Encode()
	return u.String()
}

// Approved is the response that carries a code.
func Approved(redirectURI, issuer, state, code string) string {
	return ResponseURL(redirectURI, issuer, state, url.Values{"code": {code}})
}

// Denied is the response of a person's refusal: access_denied.
func Denied(redirectURI, issuer, state string) string {
	return ResponseURL(redirectURI, issuer, state, url.Values{"error": {ErrAccessDenied}})
}

func validDevice(dev string) bool { return store.ValidName(dev) || store.IsDeviceID(dev) }
