package panel

import (
	"bytes"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/humantime"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/downloads"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/uuidtext"
)

// page is what every template gets: the signed-in admin, the CSRF token
// for its forms, which tab is open, and the page's own data.
type page struct {
	Title  string
	Tab    string
	Admin  string
	CSRF   string
	Notice string
	Data   any
}

// render writes a page; a template failure is the panel's bug, answered
// with a plain 500.
func (p *Panel) render(w http.ResponseWriter, status int, name string, pg page) {
	var b bytes.Buffer
	if err := p.pages.ExecuteTemplate(&b, name, pg); err != nil {
		p.logf("panel: page %s: %v", name, err)
		http.Error(w, "the panel could not draw this page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

func (p *Panel) show(w http.ResponseWriter, s session, tab, title string, data any) {
	p.render(w, http.StatusOK, tab+".html", page{Title: title, Tab: tab, Admin: s.admin, CSRF: s.csrf(), Data: data})
}

// fail answers with a page that says what went wrong and nothing more.
func (p *Panel) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	pg := page{Title: http.StatusText(status), Notice: msg}
	if s, ok, _ := p.auth(r); ok {
		pg.Admin, pg.CSRF = s.admin, s.csrf()
	}
	p.render(w, status, "error.html", pg)
}

// stateFailed answers for a state the relay cannot read or write.
func (p *Panel) stateFailed(w http.ResponseWriter, r *http.Request, err error) {
	p.logf("panel: state: %v", errcode.From(err).Code)
	p.fail(w, r, http.StatusServiceUnavailable, "The relay's state cannot be read just now; try again shortly.")
}

func (p *Panel) loginPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	next := afterSignIn(q.Get("next"))
	d := loginData{Code: q.Get("code"), Next: next, Consent: strings.HasPrefix(next, ConsentPath)}
	d.SSO, d.Passkey = p.loginMethods(r)
	p.render(w, http.StatusOK, "login.html", page{Title: "Sign in", Data: d})
}

// login redeems a sign-in code for a new session. An old session the
// browser still carries is ended: the session is always a new one, so no
// one can plant a session ID before the admin signs in.
func (p *Panel) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		p.fail(w, r, http.StatusForbidden, "This request did not come from the panel's own pages.")
		return
	}
	began := p.cfg.Now()
	admin, secret, err := p.cfg.State.SignIn(r.PostFormValue("code"), began)
	if errcode.Is(err, errcode.PermissionDenied) {
		p.refuseSignIn(w, r, err)
		return
	}
	if err != nil {
		p.stateFailed(w, r, err)
		return
	}
	if old, err := r.Cookie(CookieName); err == nil {
		p.cfg.State.EndSession(old.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: secret, Path: Prefix, HttpOnly: true,
		Secure: p.cfg.Secure, SameSite: http.SameSiteStrictMode})
	p.audit(session{admin: admin}, "sign_in", "", "", began, nil)
	http.Redirect(w, r, afterSignIn(r.PostFormValue("next")), http.StatusSeeOther)
}

// loginData is the sign-in page's: the code from the link, where to go
// after, whether that is an app's request to connect, and which other
// ways in the relay offers.
type loginData struct {
	Code, Next   string
	Consent      bool
	SSO, Passkey bool
}

func (p *Panel) logout(w http.ResponseWriter, r *http.Request, s session) {
	began := p.cfg.Now()
	err := p.cfg.State.EndSession(s.secret)
	p.audit(s, "sign_out", "", "", began, err)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true,
		Secure: p.cfg.Secure, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, LoginPath, http.StatusSeeOther)
}

// overviewData is the Overview page's.
type overviewData struct {
	Replicas         []store.Replica
	Checks           []Check
	Connected, Total int
	Calls, Failed    int64
	Devices          []deviceRow
	SinceHour        time.Time
}

func (p *Panel) overview(w http.ResponseWriter, r *http.Request, s session) {
	now := p.cfg.Now()
	rows, reps, err := p.deviceRows(now)
	if err != nil {
		p.stateFailed(w, r, err)
		return
	}
	d := overviewData{Replicas: reps, Checks: p.cfg.Health(), Total: len(rows), Devices: rows, SinceHour: now.Add(-time.Hour)}
	for _, dev := range rows {
		if dev.Connected {
			d.Connected++
		}
	}
	if d.Calls, d.Failed, err = p.cfg.State.AuditCounts(d.SinceHour); err != nil {
		p.stateFailed(w, r, err)
		return
	}
	p.show(w, s, "overview", "Overview", d)
}

// deviceRow is a device as the Devices page lists it.
type deviceRow struct {
	store.Device
	// ReplicaName names the replica holding its link.
	ReplicaName string
}

// deviceRows reads every device and the live replicas, naming each
// device's holder.
func (p *Panel) deviceRows(now time.Time) ([]deviceRow, []store.Replica, error) {
	devs, err := p.cfg.State.Devices()
	if err != nil {
		return nil, nil, err
	}
	reps, err := p.cfg.State.Replicas(now)
	if err != nil {
		return nil, nil, err
	}
	names := map[string]string{}
	for _, r := range reps {
		names[r.ID] = r.Name
	}
	rows := make([]deviceRow, len(devs))
	for i, d := range devs {
		rows[i] = deviceRow{Device: d, ReplicaName: names[d.Replica]}
		if d.Replica != "" && rows[i].ReplicaName == "" {
			rows[i].ReplicaName = d.Replica
		}
	}
	return rows, reps, nil
}

func (p *Panel) devices(w http.ResponseWriter, r *http.Request, s session) {
	rows, _, err := p.deviceRows(p.cfg.Now())
	if err != nil {
		p.stateFailed(w, r, err)
		return
	}
	p.show(w, s, "devices", "Devices", rows)
}

func (p *Panel) revokeDevice(w http.ResponseWriter, r *http.Request, s session) {
	began := p.cfg.Now()
	dev, _, err := p.cfg.State.RevokeDevice(r.PathValue("device"), began)
	id := ""
	if dev != nil {
		id = dev.ID
	}
	p.audit(s, "device_revoke", id, "", began, err)
	switch {
	case errcode.Is(err, errcode.NotFound):
		p.fail(w, r, http.StatusNotFound, "There is no such device.")
	case err != nil:
		p.stateFailed(w, r, err)
	default:
		http.Redirect(w, r, Prefix+"devices", http.StatusSeeOther)
	}
}

// updateAgent asks the device's agent to update to the binary the relay
// offers it; the agent verifies it, and goes back by itself when the new
// agent does not link. The Device page then shows the agent's version as
// its next link gives it.
func (p *Panel) updateAgent(w http.ResponseWriter, r *http.Request, s session) {
	began := p.cfg.Now()
	dev, ok := p.findDevice(w, r)
	if !ok {
		return
	}
	err := p.cfg.Devices.UpdateAgent(r.Context(), dev.ID)
	p.audit(s, "agent_update", dev.ID, "", began, err)
	switch {
	case errcode.Is(err, errcode.DeviceOffline):
		p.fail(w, r, http.StatusConflict, "The device is not linked now, so its agent cannot be asked to update.")
	case errcode.Is(err, errcode.InvalidArgument):
		p.fail(w, r, http.StatusConflict, "The device's agent runs the version this relay serves, or agent updates are off.")
	case err != nil:
		p.fail(w, r, http.StatusServiceUnavailable, "The relay replica holding the device's link could not be reached; try again.")
	default:
		http.Redirect(w, r, Prefix+"devices/"+dev.ID, http.StatusSeeOther)
	}
}

// tokensData is the Tokens page's: every token and OAuth connection, and
// the token just made.
type tokensData struct {
	Tokens  []tokenRow
	Now     time.Time
	Created *store.Token
	Secret  string
	TTL     string
}

// tokenRow is a token as the Tokens page lists it: its device scope with
// each device ID the relay knows by its name (the ID in a title).
type tokenRow struct {
	store.Token
	DeviceNames []who
}

func (p *Panel) tokens(w http.ResponseWriter, r *http.Request, s session) {
	p.showTokens(w, r, s, tokensData{})
}

func (p *Panel) showTokens(w http.ResponseWriter, r *http.Request, s session, d tokensData) {
	toks, err := p.cfg.State.Tokens()
	if err != nil {
		p.stateFailed(w, r, err)
		return
	}
	devs, err := p.cfg.State.Devices()
	if err != nil {
		p.stateFailed(w, r, err)
		return
	}
	byID := map[string]string{}
	for _, dev := range devs {
		byID[dev.ID] = dev.Name
	}
	for _, t := range toks {
		row := tokenRow{Token: t}
		for _, d := range t.Devices {
			dev := who{Name: d}
			if name, ok := byID[d]; ok {
				dev = who{Name: name, Title: "device " + d}
			}
			row.DeviceNames = append(row.DeviceNames, dev)
		}
		d.Tokens = append(d.Tokens, row)
	}
	d.Now, d.TTL = p.cfg.Now(), "30d"
	p.show(w, s, "tokens", "Tokens", d)
}

// createToken makes a token and shows its secret on this answer only.
func (p *Panel) createToken(w http.ResponseWriter, r *http.Request, s session) {
	began := p.cfg.Now()
	spec, err := tokenSpec(r.PostForm)
	var (
		tok    *store.Token
		secret string
	)
	if err == nil {
		tok, secret, err = p.cfg.State.CreateToken(spec, began)
	}
	p.audit(s, "token_create", "", "", began, err)
	if errcode.Is(err, errcode.InvalidArgument) {
		p.render(w, http.StatusBadRequest, "error.html", page{Title: "Token not created", Admin: s.admin, CSRF: s.csrf(),
			Notice: "The token was not created: " + errcode.From(err).Message + "."})
		return
	}
	if err != nil {
		p.stateFailed(w, r, err)
		return
	}
	p.showTokens(w, r, s, tokensData{Created: tok, Secret: secret})
}

// tokenSpec reads the token form: the CLI's flags, in fields.
func tokenSpec(f url.Values) (store.TokenSpec, error) {
	ttl, err := parseTTL(f.Get("ttl"))
	if err != nil {
		return store.TokenSpec{}, err
	}
	devs, err := authz.ParseScopes(orAll(f.Get("devices")))
	if err != nil {
		return store.TokenSpec{}, errcode.New(errcode.InvalidArgument, "devices: %v", err)
	}
	tools, err := authz.ParseScopes(orAll(f.Get("tools")))
	if err != nil {
		return store.TokenSpec{}, errcode.New(errcode.InvalidArgument, "tools: %v", err)
	}
	return store.TokenSpec{Name: strings.TrimSpace(f.Get("name")), Devices: devs, Tools: tools,
		Principal: strings.TrimSpace(f.Get("principal")), TTL: ttl}, nil
}

func orAll(v string) string {
	if strings.TrimSpace(v) == "" {
		return "*"
	}
	return v
}

// parseTTL reads a form's lifetime as the CLI reads --ttl.
func parseTTL(v string) (time.Duration, error) {
	d, err := humantime.ParseTTL(strings.TrimSpace(v))
	if err != nil {
		return 0, errcode.New(errcode.InvalidArgument, "the lifetime is %v", err)
	}
	return d, nil
}

func (p *Panel) revokeToken(w http.ResponseWriter, r *http.Request, s session) {
	began := p.cfg.Now()
	err := p.cfg.State.RevokeToken(r.PathValue("id"), began)
	p.audit(s, "token_revoke", "", "", began, err)
	switch {
	case errcode.Is(err, errcode.NotFound):
		p.fail(w, r, http.StatusNotFound, "There is no such token.")
	case err != nil:
		p.stateFailed(w, r, err)
	default:
		http.Redirect(w, r, Prefix+"tokens", http.StatusSeeOther)
	}
}

// enrollData is the Enrollment page's: the code just made, the line that
// installs the agent on the device with it (Install), and the line that
// enrolls an agent installed already (Line); TTL is the form's lifetime
// as it is typed there, Life how long the code just made works.
type enrollData struct {
	Code, Install, Line, TTL, Life string
	Servers                        []string
}

func (p *Panel) enrollPage(w http.ResponseWriter, r *http.Request, s session) {
	p.show(w, s, "enroll", "Enrollment", enrollData{TTL: ttlText(limits.EnrollCodeTTL)})
}

func (p *Panel) createEnrollCode(w http.ResponseWriter, r *http.Request, s session) {
	began := p.cfg.Now()
	ttl, err := parseTTL(orDefault(r.PostFormValue("ttl"), ttlText(limits.EnrollCodeTTL)))
	name := strings.TrimSpace(r.PostFormValue("name"))
	var code string
	if err == nil {
		code, err = p.cfg.State.CreateEnrollCode(name, ttl, began)
	}
	p.audit(s, "enroll_code", "", "", began, err)
	if errcode.Is(err, errcode.InvalidArgument) {
		p.render(w, http.StatusBadRequest, "error.html", page{Title: "No code made", Admin: s.admin, CSRF: s.csrf(),
			Notice: "No enrollment code was made: " + errcode.From(err).Message + "."})
		return
	}
	if err != nil {
		p.stateFailed(w, r, err)
		return
	}
	reps, err := p.cfg.State.Replicas(began)
	if err != nil {
		p.stateFailed(w, r, err)
		return
	}
	var servers []string
	for _, rep := range reps {
		servers = append(servers, rep.Address)
	}
	line := downloads.EnrollLine(strings.Join(servers, ","), code)
	var install string
	switch {
	case p.cfg.PublicURL != "":
		install = downloads.InstallLine(p.cfg.PublicURL, code)
	case len(servers) > 0:
		install = downloads.InstallLine(servers[0], code)
	}
	p.show(w, s, "enroll", "Enrollment", enrollData{Code: code, Install: install, Line: line, Servers: servers,
		TTL: ttlText(ttl), Life: span(ttl)})
}

func orDefault(v, def string) string {
	if strings.TrimSpace(v) == "" {
		return def
	}
	return v
}

// auditData is the Audit page's: the filter, a page of entries and where
// the next one starts.
type auditData struct {
	Names   names
	Filter  store.AuditFilter
	Entries []auditRow
	Older   string
}

// auditRow is an audit entry as the Audit page lists it: JobPath is its
// job's page, when the entry names a device and a job by their IDs (both
// UUIDs, checked again here: an address is built from nothing else).
type auditRow struct {
	store.AuditEntry
	JobPath string
}

func (p *Panel) auditLog(w http.ResponseWriter, r *http.Request, s session) {
	q := r.URL.Query()
	f := store.AuditFilter{Principal: q.Get("principal"), Device: q.Get("device"), Job: q.Get("job"), Tool: q.Get("tool"), Outcome: q.Get("outcome")}
	// Not a positive number is no bound: the newest entries.
	f.Before, _ = strconv.ParseInt(q.Get("before"), 10, 64)
	entries, err := p.cfg.State.AuditPage(f, auditRows)
	if err != nil {
		p.stateFailed(w, r, err)
		return
	}
	d := auditData{Filter: f, Names: p.names()}
	for _, e := range entries {
		row := auditRow{AuditEntry: e}
		if uuidtext.Canonical(e.Device) && uuidtext.Canonical(e.Job) {
			row.JobPath = jobPath(e.Device, e.Job)
		}
		d.Entries = append(d.Entries, row)
	}
	if len(entries) == auditRows {
		next := url.Values{}
		for k, v := range map[string]string{"principal": f.Principal, "device": f.Device, "job": f.Job, "tool": f.Tool, "outcome": f.Outcome} {
			if v != "" {
				next.Set(k, v)
			}
		}
		next.Set("before", strconv.FormatInt(entries[len(entries)-1].Seq, 10))
		d.Older = Prefix + "audit?" + next.Encode()
	}
	p.show(w, s, "audit", "Audit", d)
}
