// Package panel is the relay's web panel (docs/panel.md): server-rendered
// pages for the people who run the relay and own its devices. It reads and
// changes the relay's state, and acts on devices only through the relay's
// admin grants (Devices); it never touches a link, a job or a grant key.
//
// Every page is plain HTML from html/template with its CSS and one small
// script embedded in the binary; a Content-Security-Policy of
// default-src 'self' admits nothing else. Sessions live in the relay's
// state, so any replica serves any session; every change is a POST that
// carries the session's CSRF token.
package panel

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"html/template"
	"io/fs"
	"log"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/relay/signin"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/uuidtext"
)

// Prefix is where the panel's pages live.
const Prefix = "/panel/"

// LoginPath is the sign-in page a `relay admin create` URL opens.
const LoginPath = Prefix + "login"

const (
	// CookieName is the session cookie's name.
	CookieName = "commandcore_panel"
	// csrfField is the form field that carries the CSRF token.
	csrfField = "csrf"
	// auditRows is how many audit entries a page shows.
	auditRows = 50
	// maxForm bounds a form's body.
	maxForm = 64 << 10
	// CSP is every response's Content-Security-Policy: the panel's own
	// origin only, never framed.
	CSP = "default-src 'self'; frame-ancestors 'none'"
)

// Devices is how the panel acts on a device: the relay calls tool on the
// device with a grant whose principal is "admin:<admin>" and returns the
// call's structured result, or the call's error as an *errcode.Error.
type Devices interface {
	CallAsAdmin(ctx context.Context, admin, deviceID, tool string, args json.RawMessage) (json.RawMessage, error)
	// UpdateAgent asks the device's agent to install the binary the relay
	// offers it (the Device page's Update).
	UpdateAgent(ctx context.Context, deviceID string) error
}

// Check is one line of the Overview's health: an engine or the relay's
// peers, reachable or not.
type Check struct {
	Name   string
	OK     bool
	Detail string
}

// Config is what the panel needs from the relay.
type Config struct {
	State   store.State
	Devices Devices
	// Secrets takes the input typed for a secret prompt; nil refuses it.
	Secrets Secrets
	// Health says what the relay depends on and whether it answers.
	Health func() []Check
	// Audit records one panel action (content-free, as a tool call's).
	Audit func(store.AuditEntry)
	// LimitSignIn wraps the sign-in handler with the relay's per-address
	// rate limit (the enrollment one).
	LimitSignIn func(http.Handler) http.Handler
	// SignIn, when set, offers the sign-ins besides a code: the team's
	// identity provider and passkeys.
	SignIn *signin.SignIn
	// Secure marks the session cookie Secure: the panel is served by TLS.
	Secure bool
	// Issuer is the relay's public URL, its OAuth issuer: the consent
	// page returns it to the client as iss. Empty, the relay serves no
	// OAuth and the consent page refuses.
	Issuer string
	// PublicURL is the relay as devices reach it, for the install line
	// on the Enrollment page; empty, the first live replica's address.
	PublicURL string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log gets content-free lines about failures; nil discards them.
	Log *log.Logger
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

//go:embed static/icon.svg
var icon []byte

// Panel serves the pages.
type Panel struct {
	cfg   Config
	pages *template.Template
}

// New returns the panel over cfg.
func New(cfg Config) (*Panel, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LimitSignIn == nil {
		cfg.LimitSignIn = func(h http.Handler) http.Handler { return h }
	}
	if cfg.Audit == nil {
		cfg.Audit = func(store.AuditEntry) {}
	}
	if cfg.Health == nil {
		cfg.Health = func() []Check { return nil }
	}
	p := &Panel{cfg: cfg}
	t, err := template.New("").Funcs(p.funcs()).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p.pages = t
	return p, nil
}

// Handler serves the panel under Prefix, with its headers on every answer.
func (p *Panel) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /favicon.ico", favicon)
	mux.HandleFunc("GET "+LoginPath, p.loginPage)
	mux.Handle("POST "+LoginPath, p.cfg.LimitSignIn(http.HandlerFunc(p.login)))
	mux.HandleFunc("GET "+Prefix+"{$}", p.signedIn(p.overview))
	mux.HandleFunc("GET "+Prefix+"devices", p.signedIn(p.devices))
	mux.HandleFunc("GET "+Prefix+"devices/{device}", p.signedIn(p.device))
	mux.HandleFunc("GET "+Prefix+"devices/{device}/jobs/{job}", p.signedIn(p.job))
	mux.HandleFunc("GET "+Prefix+"devices/{device}/jobs/{job}/tail", p.signedIn(p.tail))
	mux.HandleFunc("GET "+Prefix+"events/devices", p.signedIn(p.deviceEvents))
	mux.HandleFunc("GET "+Prefix+"tokens", p.signedIn(p.tokens))
	mux.HandleFunc("GET "+Prefix+"enroll", p.signedIn(p.enrollPage))
	mux.HandleFunc("GET "+Prefix+"audit", p.signedIn(p.auditLog))
	mux.HandleFunc("GET "+SecretPath+"{id}", p.signedIn(p.secretPage))
	mux.HandleFunc("GET "+ConsentPath+"{id}", p.signedIn(p.consentPage))
	mux.HandleFunc("POST "+Prefix+"logout", p.changes(p.logout))
	mux.HandleFunc("POST "+Prefix+"devices/{device}/revoke", p.changes(p.revokeDevice))
	mux.HandleFunc("POST "+Prefix+"devices/{device}/update", p.changes(p.updateAgent))
	mux.HandleFunc("POST "+Prefix+"devices/{device}/jobs/{job}/stop", p.changes(p.stopJob))
	mux.HandleFunc("POST "+Prefix+"tokens", p.changes(p.createToken))
	mux.HandleFunc("POST "+Prefix+"tokens/{id}/revoke", p.changes(p.revokeToken))
	mux.HandleFunc("POST "+Prefix+"enroll", p.changes(p.createEnrollCode))
	mux.HandleFunc("POST "+SecretPath+"{id}", p.changes(p.submitSecret))
	mux.HandleFunc("POST "+ConsentPath+"{id}", p.changes(p.answerConsent))
	p.signInRoutes(mux)
	return headers(mux)
}

// favicon answers the address browsers ask for an icon at with the
// panel's own (pages name it too, by its static address).
func favicon(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Write(icon)
}

// headers sets what every answer carries, pages and refusals alike, and
// bounds what a request may send.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// session is a signed-in request's admin and its cookie's value.
type session struct {
	admin  string
	secret string
}

// principal is who the admin acts as on devices and in the audit.
func (s session) principal() string { return "admin:" + s.admin }

// csrf is the session's CSRF token: a MAC of its secret, which only the
// session's own pages carry (the cookie is HttpOnly and SameSite=Strict).
func (s session) csrf() string {
	m := hmac.New(sha256.New, []byte(s.secret))
	m.Write([]byte("commandcore panel csrf"))
	return hex.EncodeToString(m.Sum(nil))
}

type handler func(w http.ResponseWriter, r *http.Request, s session)

// auth resolves the request's session, or says why there is none: nil
// error and ok false for no or a bad session, an error when the state
// cannot judge.
func (p *Panel) auth(r *http.Request) (session, bool, error) {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return session{}, false, nil
	}
	ps, err := p.cfg.State.AuthSession(c.Value, p.cfg.Now())
	if errcode.Is(err, errcode.PermissionDenied) {
		return session{}, false, nil
	}
	if err != nil {
		return session{}, false, err
	}
	return session{admin: ps.Admin, secret: c.Value}, true, nil
}

// signedIn serves a page to a signed-in admin; anyone else is sent to the
// sign-in page. A browser that followed a link from another site sends no
// SameSite=Strict cookie, so it first gets a page that loads the same
// address again from the panel's own origin, cookie included: a
// signed-in person is not asked to sign in again.
func (p *Panel) signedIn(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok, err := p.auth(r)
		switch {
		case err != nil:
			p.fail(w, r, http.StatusServiceUnavailable, "The relay's state cannot be read just now; try again shortly.")
		case !ok && r.Header.Get("Sec-Fetch-Site") == "cross-site" && r.Method == http.MethodGet:
			p.render(w, http.StatusOK, "reload.html", page{Title: "Opening the panel", Data: r.URL.Path})
		case !ok:
			to := LoginPath
			if r.Method == http.MethodGet && afterSignIn(r.URL.Path) != Prefix {
				to += "?next=" + url.QueryEscape(r.URL.Path)
			}
			http.Redirect(w, r, to, http.StatusSeeOther)
		default:
			h(w, r, s)
		}
	}
}

// afterSignIn is where a sign-in continues: a secret prompt's or a
// consent page the person was sent to before signing in, else the
// Overview. Nothing else is followed, so a link cannot send a new session
// anywhere.
func afterSignIn(next string) string {
	for _, prefix := range []string{SecretPath, ConsentPath} {
		if id, ok := strings.CutPrefix(next, prefix); ok && pathID(id) {
			return next
		}
	}
	return Prefix
}

// pathID reports whether id may be the last element of a panel path that
// a sign-in returns to: 1 to 128 letters, digits, '_' and '-' (a prompt's
// or a request's ID), nothing that could lead elsewhere.
func pathID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// changes serves a POST from a signed-in admin's own page: a session, a
// same-origin request and the session's CSRF token, else 403.
func (p *Panel) changes(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			p.fail(w, r, http.StatusForbidden, "This request did not come from the panel's own pages.")
			return
		}
		s, ok, err := p.auth(r)
		switch {
		case err != nil:
			p.fail(w, r, http.StatusServiceUnavailable, "The relay's state cannot be read just now; try again shortly.")
			return
		case !ok:
			p.fail(w, r, http.StatusForbidden, "You are not signed in, or your session ended.")
			return
		}
		if !hmac.Equal([]byte(r.PostFormValue(csrfField)), []byte(s.csrf())) {
			p.fail(w, r, http.StatusForbidden, "This form is stale or did not come from the panel; reload the page and try again.")
			return
		}
		h(w, r, s)
	}
}

// sameOrigin refuses what a browser marks as coming from another origin.
// A browser that sends Sec-Fetch-Site is taken at its word: under the
// panel's Referrer-Policy: no-referrer it sends "Origin: null" even for
// the panel's own forms. Without it, an Origin must be the panel's own.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
	default:
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// audit records one of an admin's actions in the panel.
func (p *Panel) audit(s session, action, device, job string, began time.Time, err error) {
	p.record(s, "panel."+action, device, job, began, err)
}

// record writes the audit entry of one thing an admin did: a panel action
// or a device call, with its outcome and never its content. job names the
// job it was about when it is a job's ID (the log holds no other).
func (p *Panel) record(s session, tool, device, job string, began time.Time, err error) {
	e := store.AuditEntry{At: began, Principal: s.principal(), Device: device, Tool: tool,
		Outcome: store.AuditOK, DurationUS: p.cfg.Now().Sub(began).Microseconds()}
	if uuidtext.Canonical(job) {
		e.Job = job
	}
	if err != nil {
		e.Outcome, e.Code = store.AuditFailed, string(errcode.From(err).Code)
	}
	p.cfg.Audit(e)
}

func (p *Panel) logf(format string, args ...any) {
	if p.cfg.Log != nil {
		p.cfg.Log.Printf(format, args...)
	}
}
