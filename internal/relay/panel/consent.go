package panel

import (
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/toolspec"
)

// ConsentPath is where a person answers an OAuth client's authorization
// request: the relay's authorization endpoint sends the browser to
// ConsentPath + the request's ID.
const ConsentPath = Prefix + "consent/"

// consentDays are the lifetimes the consent page offers, in days, the
// last limits.OAuthConnectionMax (a test pins it).
var consentDays = []int{1, 7, 30, 90, 365}

// toolTitles are the device tools and their titles, read once from the
// relay's tool table when a consent page first needs them.
var toolTitles = sync.OnceValue(func() []choice {
	var out []choice
	for _, t := range toolspec.Tools() {
		out = append(out, choice{Value: t.Name, Label: t.Title})
	}
	return out
})

// choice is one checkbox, radio or option of the consent form.
type choice struct {
	Value, Label, Detail string
	Checked              bool
}

// consentData is the consent page's: who asks, where the answer goes,
// and the choices, preselected from the request or as the person left
// them.
type consentData struct {
	ID string
	// Client is the client's name as it gave it (empty: it gave none),
	// ClientID its ID and Host where the browser goes with the answer.
	Client, ClientID, Host string
	// Loopback: the answer goes to an app on the person's own computer.
	Loopback bool
	// Device is the one device the client asked for (by the name or ID
	// it gave, Known when this relay has it); Devices the relay's devices
	// to choose from when it asked for them all.
	Device      string
	DeviceKnown bool
	Devices     []choice
	Presets     []choice
	Tools       []choice
	Principal   string
	Days        []choice
	ExpiresAt   time.Time
}

// consent is the request a consent page or its answer is about, and how
// its devices read.
type consent struct {
	id  string
	req *store.AuthRequest
	// device is the one device the request's resource names; "" for the
	// multi-device endpoint.
	device string
	// deviceID is that device's ID when this relay has it.
	deviceID string
	devices  []store.Device
	// back is the request's redirect URI, where the answer goes.
	back *url.URL
}

// loadConsent reads the waiting request a path names; an unknown,
// answered or expired one gets one plain page, never a redirect.
func (p *Panel) loadConsent(w http.ResponseWriter, r *http.Request) (*consent, bool) {
	if p.cfg.Issuer == "" {
		p.fail(w, r, http.StatusNotFound, "This relay does not serve OAuth sign-ins: it has no public URL.")
		return nil, false
	}
	c := &consent{id: r.PathValue("id")}
	var err error
	c.req, err = p.cfg.State.AuthRequest(c.id, p.cfg.Now())
	if errcode.Is(err, errcode.NotFound) {
		p.fail(w, r, http.StatusNotFound, "This request to connect an app is unknown, already answered or expired. Start again from the app.")
		return nil, false
	}
	if err != nil {
		p.stateFailed(w, r, err)
		return nil, false
	}
	if c.back, err = url.Parse(c.req.RedirectURI); err != nil {
		p.fail(w, r, http.StatusBadRequest, "The app's return address cannot be read.")
		return nil, false
	}
	dev, all, ok := resourceDevice(c.req.Resource)
	if !ok {
		p.fail(w, r, http.StatusBadRequest, "This request names no MCP address of this relay.")
		return nil, false
	}
	if !all {
		c.device = dev
		if d, err := p.cfg.State.FindDevice(dev); err == nil {
			c.deviceID = d.ID
		}
		return c, true
	}
	devs, err := p.cfg.State.Devices()
	if err != nil {
		p.stateFailed(w, r, err)
		return nil, false
	}
	c.devices = offered(devs)
	return c, true
}

// offered are the devices a connection may be given: those in good
// standing (a revoked or compromised device is no choice), connected ones
// first, each part by name.
func offered(devs []store.Device) []store.Device {
	var out []store.Device
	for _, d := range devs {
		if d.Standing == store.StandingActive {
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, func(a, b store.Device) int {
		if a.Connected != b.Connected {
			if a.Connected {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// resourceDevice reads an MCP URL: the device of /…/mcp/<device>, or all
// for /…/mcp; ok is false for any other path.
func resourceDevice(resource string) (device string, all, ok bool) {
	u, err := url.Parse(resource)
	if err != nil {
		return "", false, false
	}
	p := strings.TrimSuffix(u.Path, "/")
	if strings.HasSuffix(p, "/mcp") {
		return "", true, true
	}
	if dir, dev := path.Split(p); strings.HasSuffix(dir, "/mcp/") && store.ValidName(dev) {
		return dev, false, true
	}
	return "", false, false
}

// consentPage shows the request with its choices preselected: the scope
// the client asked for (read, when it asked for none, or for every preset:
// a client that asks for every scope the relay names, as MCP's clients do
// with a 401's, has chosen nothing), the relay's devices, the person's own
// name as the principal, 30 days.
func (p *Panel) consentPage(w http.ResponseWriter, r *http.Request, s session) {
	c, ok := p.loadConsent(w, r)
	if !ok {
		return
	}
	presets := authz.ParsePresetScope(c.req.Scope)
	if len(presets) == 0 || len(presets) == len(authz.Presets) {
		presets = []string{"read"}
	}
	d := p.consentData(c, preselected(c.devices), presets, nil, s.admin, int(limits.OAuthConnectionTTL/(24*time.Hour)))
	p.show(w, s, "consent", "Connect an app", d)
}

// preselected are the devices the page ticks at first: each of the
// relay's, or none when they are more than a connection's scope may name
// one by one (the person then ticks some, or every device).
func preselected(devs []store.Device) []string {
	if len(devs) > store.MaxScopeEntries {
		return nil
	}
	ids := make([]string, len(devs))
	for i, d := range devs {
		ids[i] = d.ID
	}
	return ids
}

// consentData is the page for c with these choices made.
func (p *Panel) consentData(c *consent, devices, presets, tools []string, principal string, days int) consentData {
	d := consentData{ID: c.id, Client: c.req.ClientName, ClientID: c.req.ClientID, Device: c.device,
		DeviceKnown: c.deviceID != "", Principal: principal, ExpiresAt: c.req.ExpiresAt}
	d.Host = c.back.Host
	d.Loopback = c.back.Hostname() == "localhost" || net.ParseIP(c.back.Hostname()).IsLoopback()
	if c.device == "" {
		d.Devices = append(d.Devices, choice{Value: authz.ScopeAll, Label: "Every device, those enrolled later too",
			Checked: slices.Contains(devices, authz.ScopeAll)})
		for _, dev := range c.devices {
			d.Devices = append(d.Devices, choice{Value: dev.ID, Label: dev.Name, Detail: dev.ID, Checked: slices.Contains(devices, dev.ID)})
		}
	}
	for _, pr := range authz.Presets {
		d.Presets = append(d.Presets, choice{Value: pr.Name, Label: pr.Title, Detail: strings.Join(pr.Tools, ", "),
			Checked: slices.Contains(presets, pr.Name)})
	}
	for _, t := range toolTitles() {
		t.Checked = slices.Contains(tools, t.Value)
		d.Tools = append(d.Tools, t)
	}
	for _, n := range consentDays {
		d.Days = append(d.Days, choice{Value: strconv.Itoa(n), Label: dayLabel(n), Checked: n == days})
	}
	return d
}

func dayLabel(n int) string {
	if n == 1 {
		return "1 day"
	}
	return strconv.Itoa(n) + " days"
}

// answerConsent takes the person's answer: Allow makes a code for what
// the form chose and sends the browser back to the client with it; Deny
// sends it back with access_denied. A choice the relay refuses shows the
// page again, saying why; the request keeps waiting.
func (p *Panel) answerConsent(w http.ResponseWriter, r *http.Request, s session) {
	c, ok := p.loadConsent(w, r)
	if !ok {
		return
	}
	began := p.cfg.Now()
	back := url.Values{}
	if r.PostFormValue("answer") != "allow" {
		req, err := p.cfg.State.DenyAuthRequest(c.id, began)
		p.audit(s, "consent_denied", c.deviceID, "", began, err)
		if err != nil {
			p.consentFailed(w, r, err)
			return
		}
		back.Set("error", "access_denied")
		p.returnToClient(w, r, c, req, back)
		return
	}
	spec, days, err := p.consentSpec(c, r.PostForm, s)
	if err == nil {
		var code string
		var req *store.AuthRequest
		code, req, err = p.cfg.State.ApproveAuthRequest(c.id, spec, began)
		if err == nil {
			p.audit(s, "consent_given", c.deviceID, "", began, nil)
			back.Set("code", code)
			p.returnToClient(w, r, c, req, back)
			return
		}
	}
	p.audit(s, "consent_given", c.deviceID, "", began, err)
	if !errcode.Is(err, errcode.InvalidArgument) {
		p.consentFailed(w, r, err)
		return
	}
	f := r.PostForm
	d := p.consentData(c, f["device"], f["preset"], f["tool"], f.Get("principal"), days)
	p.render(w, http.StatusBadRequest, "consent.html", page{Title: "Connect an app", Tab: "consent", Admin: s.admin, CSRF: s.csrf(), Data: d,
		Notice: "Nothing was allowed: " + errcode.From(err).Message + ". The app still waits for your answer."})
}

// consentFailed answers for a request that could not be answered.
func (p *Panel) consentFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errcode.Is(err, errcode.NotFound) {
		p.fail(w, r, http.StatusNotFound, "This request to connect an app is unknown, already answered or expired. Start again from the app.")
		return
	}
	p.stateFailed(w, r, err)
}

// returnToClient sends the browser to the request's redirect URI with
// params, its state and the relay as iss, keeping the URI's own query.
func (p *Panel) returnToClient(w http.ResponseWriter, r *http.Request, c *consent, req *store.AuthRequest, params url.Values) {
	if req.State != "" {
		params.Set("state", req.State)
	}
	params.Set("iss", p.cfg.Issuer)
	u := *c.back
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += params.Encode()
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

// consentSpec reads the consent form: the devices (the request's one, or
// those checked of the relay's), the powers (the presets' tools and the
// single tools checked), the principal (never an admin's) and the
// lifetime in days. It returns the days as read, for the page shown
// again.
func (p *Panel) consentSpec(c *consent, f url.Values, s session) (store.ConnectionSpec, int, error) {
	days, err := strconv.Atoi(f.Get("days"))
	if err != nil || days < 1 || time.Duration(days)*24*time.Hour > limits.OAuthConnectionMax {
		return store.ConnectionSpec{}, 0, errcode.New(errcode.InvalidArgument, "a connection lasts 1 to %d days", int(limits.OAuthConnectionMax/(24*time.Hour)))
	}
	spec := store.ConnectionSpec{Principal: strings.TrimSpace(f.Get("principal")), TTL: time.Duration(days) * 24 * time.Hour, Admin: s.admin}
	switch {
	case strings.HasPrefix(spec.Principal, principal.AdminPrefix):
		return spec, days, errcode.New(errcode.InvalidArgument, "an app never acts as a panel admin (admin:…): give it a principal of its own")
	case !principal.Valid(spec.Principal):
		return spec, days, errcode.New(errcode.InvalidArgument, "the principal is 1 to %d letters, digits, '.', '_' and '-', and not \"local\"", principal.MaxBytes)
	}
	if spec.Devices, err = c.chosenDevices(f["device"]); err != nil {
		return spec, days, err
	}
	if spec.Tools, err = chosenTools(f["preset"], f["tool"]); err != nil {
		return spec, days, err
	}
	return spec, days, nil
}

// chosenDevices is the request's one device (by its ID when the relay
// has it), whatever the form says; or the devices checked, each "*" or
// one of the relay's.
func (c *consent) chosenDevices(checked []string) ([]string, error) {
	if c.device != "" {
		if c.deviceID != "" {
			return []string{c.deviceID}, nil
		}
		return []string{c.device}, nil
	}
	if len(checked) == 0 {
		return nil, errcode.New(errcode.InvalidArgument, "choose at least one device")
	}
	for _, d := range checked {
		if d != authz.ScopeAll && !slices.ContainsFunc(c.devices, func(dev store.Device) bool { return dev.ID == d }) {
			return nil, errcode.New(errcode.InvalidArgument, "a device chosen is not one of this relay's")
		}
	}
	if slices.Contains(checked, authz.ScopeAll) {
		return []string{authz.ScopeAll}, nil
	}
	return checked, nil
}

// chosenTools is the union of the presets' tools and the single tools
// checked, each a tool of the relay's table.
func chosenTools(presets, single []string) ([]string, error) {
	tools, ok := authz.PresetTools(presets)
	if !ok {
		return nil, errcode.New(errcode.InvalidArgument, "a power chosen is not one the page offers")
	}
	for _, t := range single {
		if !slices.ContainsFunc(toolTitles(), func(c choice) bool { return c.Value == t }) {
			return nil, errcode.New(errcode.InvalidArgument, "a tool chosen is not one the page offers")
		}
		if !slices.Contains(tools, t) {
			tools = append(tools, t)
		}
	}
	switch {
	case slices.Contains(tools, authz.ScopeAll):
		return []string{authz.ScopeAll}, nil
	case len(tools) == 0:
		return nil, errcode.New(errcode.InvalidArgument, "choose at least one power or tool")
	}
	return tools, nil
}
