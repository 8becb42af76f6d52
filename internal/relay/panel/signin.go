package panel

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/signin"
)

const (
	// signInCookie names a sign-in under way (an SSO trip, a passkey
	// prompt). It is SameSite=Lax: the identity provider sends the
	// browser back from another site.
	signInCookie = "commandcore_signin"
	// signInRefused is every refusal of every kind of sign-in.
	signInRefused = "This sign-in is invalid, used or expired, or not allowed. Try again, or ask for a sign-in link: commandcore relay admin create NAME."
	// passkeyTab is the signed-in admin's own page of passkeys.
	passkeyTab = "passkeys"
)

// signInRoutes adds the SSO and passkey sign-ins and the Passkeys page.
func (p *Panel) signInRoutes(mux *http.ServeMux) {
	limit := func(h http.HandlerFunc) http.Handler { return p.cfg.LimitSignIn(h) }
	mux.Handle("POST "+LoginPath+"/sso", limit(p.beginSSO))
	mux.Handle("GET "+signin.CallbackPath, limit(p.finishSSO))
	mux.Handle("POST "+LoginPath+"/passkey/begin", limit(p.beginPasskey))
	mux.Handle("POST "+LoginPath+"/passkey", limit(p.finishPasskey))
	mux.HandleFunc("GET "+Prefix+"passkeys", p.signedIn(p.passkeysPage))
	mux.HandleFunc("POST "+Prefix+"passkeys/begin", p.changes(p.beginAddPasskey))
	mux.HandleFunc("POST "+Prefix+"passkeys", p.changes(p.finishAddPasskey))
	mux.HandleFunc("POST "+Prefix+"passkeys/{id}/remove", p.changes(p.removePasskey))
}

// loginMethods is what the sign-in page offers besides a code field: a
// passkey only at the panel's own address, where passkeys work.
func (p *Panel) loginMethods(r *http.Request) (sso, passkey bool) {
	if p.cfg.SignIn == nil {
		return false, false
	}
	if p.cfg.SignIn.Passkeys() && strings.EqualFold(r.Host, p.cfg.SignIn.Host()) {
		has, err := p.cfg.State.HasPasskeys()
		passkey = err == nil && has
	}
	return p.cfg.SignIn.SSO(), passkey
}

func (p *Panel) setSignInCookie(w http.ResponseWriter, value string) {
	c := &http.Cookie{Name: signInCookie, Value: value, Path: Prefix, HttpOnly: true, Secure: p.cfg.Secure,
		SameSite: http.SameSiteLaxMode, MaxAge: int(limits.SignInStateTTL / time.Second)}
	if value == "" {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

func signInCookieOf(r *http.Request) string {
	c, err := r.Cookie(signInCookie)
	if err != nil {
		return ""
	}
	return c.Value
}

// startSession gives the browser admin's new session, ending the one it
// carried, and audits the sign-in of kind.
func (p *Panel) startSession(w http.ResponseWriter, r *http.Request, admin, secret, kind string, began time.Time) {
	if old, err := r.Cookie(CookieName); err == nil {
		p.cfg.State.EndSession(old.Value)
	}
	if signInCookieOf(r) != "" {
		p.setSignInCookie(w, "")
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: secret, Path: Prefix, HttpOnly: true,
		Secure: p.cfg.Secure, SameSite: http.SameSiteStrictMode})
	p.audit(session{admin: admin}, kind, "", "", began, nil)
}

// refuseSignIn answers a refused sign-in with the one refusal, or a state
// that cannot be read with its own page; why goes to the local log only.
func (p *Panel) refuseSignIn(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, signin.ErrRefused) {
		p.logf("panel: sign-in refused: %s", signin.Why(err))
	} else if !errcode.Is(err, errcode.PermissionDenied) {
		p.logf("panel: sign-in: %v", errcode.From(err).Code)
	}
	if signInCookieOf(r) != "" {
		p.setSignInCookie(w, "")
	}
	p.render(w, http.StatusForbidden, "login.html", page{Title: "Sign in", Notice: signInRefused})
}

// beginSSO sends the browser to the team's identity provider.
func (p *Panel) beginSSO(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) || !p.cfg.SignIn.SSO() {
		p.fail(w, r, http.StatusForbidden, "This request did not come from the panel's own pages.")
		return
	}
	to, cookie, err := p.cfg.SignIn.BeginSSO(r.Context(), afterSignIn(r.PostFormValue("next")))
	if err != nil {
		p.logf("panel: sign-in with the identity provider: %v", err)
		p.fail(w, r, http.StatusServiceUnavailable, "The team's identity provider cannot be reached just now; try again shortly.")
		return
	}
	p.setSignInCookie(w, cookie)
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// finishSSO is where the identity provider sends the browser back. The
// new session's cookie is SameSite=Strict, which a browser withholds
// from the rest of a redirect that another site began; so the answer is
// a page of the panel's own that goes on to the panel.
func (p *Panel) finishSSO(w http.ResponseWriter, r *http.Request) {
	began := p.cfg.Now()
	if !p.cfg.SignIn.SSO() {
		p.refuseSignIn(w, r, signin.ErrRefused)
		return
	}
	admin, secret, next, err := p.cfg.SignIn.FinishSSO(r.Context(), signInCookieOf(r), r.URL.Query())
	if err != nil {
		p.refuseSignIn(w, r, err)
		return
	}
	p.startSession(w, r, admin, secret, "sign_in_sso", began)
	p.render(w, http.StatusOK, "continue.html", page{Title: "Signed in", Data: afterSignIn(next)})
}

// beginPasskey answers the options for navigator.credentials.get.
func (p *Panel) beginPasskey(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) || !p.cfg.SignIn.Passkeys() {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": signInRefused})
		return
	}
	options, cookie, err := p.cfg.SignIn.BeginPasskey()
	if err != nil {
		p.logf("panel: passkey sign-in: %v", errcode.From(err).Code)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "The relay's state cannot be read just now; try again shortly."})
		return
	}
	p.setSignInCookie(w, cookie)
	writeJSON(w, http.StatusOK, json.RawMessage(options))
}

// finishPasskey signs in with the browser's assertion and answers where
// to go on to.
func (p *Panel) finishPasskey(w http.ResponseWriter, r *http.Request) {
	began := p.cfg.Now()
	if !sameOrigin(r) || !p.cfg.SignIn.Passkeys() {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": signInRefused})
		return
	}
	admin, secret, err := p.cfg.SignIn.FinishPasskey(signInCookieOf(r), []byte(r.PostFormValue("credential")))
	if err != nil {
		p.logf("panel: passkey sign-in refused: %s", signin.Why(err))
		p.setSignInCookie(w, "")
		writeJSON(w, http.StatusForbidden, map[string]string{"error": signInRefused})
		return
	}
	p.startSession(w, r, admin, secret, "sign_in_passkey", began)
	writeJSON(w, http.StatusOK, map[string]string{"next": afterSignIn(r.PostFormValue("next"))})
}

// passkeyRow is one of the admin's passkeys as their page lists it.
type passkeyRow struct {
	ID        string
	CreatedAt time.Time
	UsedAt    *time.Time
}

// passkeysData is the Passkeys page's.
type passkeysData struct {
	Available bool
	// Elsewhere is the panel's public address when this page was reached
	// by another: passkeys are made and used only there.
	Elsewhere string
	Keys      []passkeyRow
	Max       int
}

func (p *Panel) passkeysPage(w http.ResponseWriter, r *http.Request, s session) {
	d := passkeysData{Available: p.cfg.SignIn.Passkeys(), Max: limits.PasskeysPerAdmin}
	if d.Available && !strings.EqualFold(r.Host, p.cfg.SignIn.Host()) {
		d.Elsewhere = p.cfg.SignIn.Origin() + Prefix + "passkeys"
	}
	keys, err := p.cfg.State.Passkeys(s.admin)
	if err != nil {
		p.stateFailed(w, r, err)
		return
	}
	for _, k := range keys {
		d.Keys = append(d.Keys, passkeyRow{ID: base64.RawURLEncoding.EncodeToString(k.ID), CreatedAt: k.CreatedAt, UsedAt: k.UsedAt})
	}
	p.show(w, s, passkeyTab, "Passkeys", d)
}

// beginAddPasskey answers the options for navigator.credentials.create.
func (p *Panel) beginAddPasskey(w http.ResponseWriter, r *http.Request, s session) {
	options, cookie, err := p.cfg.SignIn.BeginAddPasskey(s.admin)
	if err != nil {
		p.logf("panel: add a passkey: %v", errcode.From(err).Code)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "A passkey cannot be added just now."})
		return
	}
	p.setSignInCookie(w, cookie)
	writeJSON(w, http.StatusOK, json.RawMessage(options))
}

// finishAddPasskey registers the credential the browser created.
func (p *Panel) finishAddPasskey(w http.ResponseWriter, r *http.Request, s session) {
	began := p.cfg.Now()
	err := p.cfg.SignIn.FinishAddPasskey(s.admin, signInCookieOf(r), []byte(r.PostFormValue("credential")))
	p.setSignInCookie(w, "")
	p.audit(s, "passkey_add", "", "", began, err)
	switch {
	case errcode.Is(err, errcode.Conflict):
		writeJSON(w, http.StatusConflict, map[string]string{"error": "You have as many passkeys as an admin may keep; remove one first."})
	case err != nil:
		p.logf("panel: add a passkey: %s", signin.Why(err))
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "The passkey was not added. Try again."})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"next": Prefix + "passkeys"})
	}
}

func (p *Panel) removePasskey(w http.ResponseWriter, r *http.Request, s session) {
	began := p.cfg.Now()
	id, err := base64.RawURLEncoding.DecodeString(r.PathValue("id"))
	if err == nil {
		err = p.cfg.State.RemovePasskey(s.admin, id)
	} else {
		err = errcode.New(errcode.NotFound, "no such passkey")
	}
	p.audit(s, "passkey_remove", "", "", began, err)
	switch {
	case errcode.Is(err, errcode.NotFound):
		p.fail(w, r, http.StatusNotFound, "You have no such passkey.")
	case err != nil:
		p.stateFailed(w, r, err)
	default:
		http.Redirect(w, r, Prefix+"passkeys", http.StatusSeeOther)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
