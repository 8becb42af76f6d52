package panel

import (
	"encoding/json"
	"github.com/commandcore/commandcore/internal/authz"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/relay/store"
)

// TestTimesReadRelative: a time shows how long ago (or how soon) it is,
// to its largest whole unit, with the absolute time for its title; an
// unset one is a dash.
func TestTimesReadRelative(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                      "just now",
		9 * time.Second:        "just now",
		-9 * time.Second:       "just now",
		-10 * time.Second:      "in 10 s",
		10 * time.Second:       "10 s ago",
		59 * time.Second:       "59 s ago",
		time.Minute:            "1 min ago",
		3*time.Minute + 59e9:   "3 min ago",
		time.Hour:              "1 h ago",
		47 * time.Hour:         "47 h ago",
		48 * time.Hour:         "2 days ago",
		-29*24*time.Hour - 1e9: "in 29 days",
		-90 * time.Second:      "in 1 min",
	} {
		if got := relative(d); got != want {
			t.Errorf("relative(%v) = %q, want %q", d, got, want)
		}
	}
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	then := now.Add(-3 * time.Minute)
	for _, v := range []any{then, &then} {
		if m := at(v, now); m != (moment{Rel: "3 min ago", Abs: "2026-12-03 09:57:00Z", ISO: "2026-12-03T09:57:00Z"}) {
			t.Errorf("at(%T) = %+v", v, m)
		}
	}
	for _, v := range []any{(*time.Time)(nil), time.Time{}, "x"} {
		if m := at(v, now); m != (moment{Rel: "—"}) {
			t.Errorf("at(%#v) = %+v, want a dash", v, m)
		}
	}
}

// TestDurationsReadAsTime: durations read as the CLI prints them, never
// as raw microseconds.
func TestDurationsReadAsTime(t *testing.T) {
	for d, want := range map[time.Duration]string{
		80044761 * time.Microsecond: "1m20s",
		12 * time.Millisecond:       "12ms",
		time.Millisecond:            "1ms",
		999 * time.Microsecond:      "< 1ms",
		2500 * time.Millisecond:     "2.5s",
	} {
		if got := took(d); got != want {
			t.Errorf("took(%v) = %q, want %q", d, got, want)
		}
	}
	f := newFixture(t, false)
	now := time.Now()
	if err := f.state.AppendAudit([]store.AuditEntry{{At: now, Principal: "x", Tool: "process.output", Outcome: store.AuditOK, DurationUS: 80044761}}, now); err != nil {
		t.Fatal(err)
	}
	_, page := f.do(f.signIn("alice"), "GET", Prefix+"audit", nil, nil)
	if !strings.Contains(page, `<td data-label="Took">1m20s</td>`) || strings.Contains(page, "µs") {
		t.Errorf("the audit page's durations:\n%s", page)
	}
}

// TestJobsSayHowTheyEnded: a job's state is a badge of its tone; an ended
// job shows its exit code or signal, who stopped it and how long it ran,
// on the Device page and on its own; a running one how long so far.
func TestJobsSayHowTheyEnded(t *testing.T) {
	f := newFixture(t, false)
	dev := enrolled(t, f, "box")
	c := f.signIn("alice")
	started := time.Now().Add(-10 * time.Minute).UTC().Format(time.RFC3339Nano)
	jobs := map[string]string{
		"stopped": `{"process_id":"` + job1 + `","state":"stopped_by_request","terminal":true,"signal":"TERM","stopped_by":"request",
			"created_at":"2026-12-03T09:59:59Z","started_at":"2026-12-03T10:00:00Z","completed_at":"2026-12-03T10:01:20.044Z"}`,
		"failed":  `{"process_id":"` + job1 + `","state":"exited","terminal":true,"exit_code":2,"created_at":"2026-12-03T10:00:00Z","completed_at":"2026-12-03T10:00:00.012Z"}`,
		"done":    `{"process_id":"` + job1 + `","state":"exited","terminal":true,"exit_code":0,"created_at":"2026-12-03T10:00:00Z","completed_at":"2026-12-03T10:00:02.5Z"}`,
		"running": `{"process_id":"` + job1 + `","state":"running","created_at":"` + started + `","started_at":"` + started + `"}`,
	}
	want := map[string][]string{
		"stopped": {`<span id="job-state" class="badge off">stopped_by_request</span>`, `<dd id="job-how">signal TERM, stopped by request</dd>`,
			`<dd id="job-took">1m20s</dd>`, `<dd id="job-ended"><time datetime="2026-12-03T10:01:20Z" title="2026-12-03 10:01:20Z">`},
		"failed":  {`<span id="job-state" class="badge bad">exited</span>`, `<dd id="job-how">exit 2</dd>`, `<dd id="job-took">12ms</dd>`},
		"done":    {`<span id="job-state" class="badge ok">exited</span>`, `<dd id="job-how">exit 0</dd>`, `<dd id="job-took">2.5s</dd>`},
		"running": {`<span id="job-state" class="badge live">running</span>`, `<dd id="job-how">—</dd>`, `<dd id="job-took">10m0s so far</dd>`, `<dd id="job-ended">—</dd>`},
	}
	for name, rec := range jobs {
		f.devices.fn = func(tool string, _ json.RawMessage) (json.RawMessage, error) {
			if tool == "process.jobs" {
				return json.RawMessage(`{"jobs":[` + rec + `]}`), nil
			}
			return json.RawMessage(rec), nil
		}
		_, page := f.do(c, "GET", jobPath(dev.ID, job1), nil, nil)
		for _, w := range want[name] {
			if !strings.Contains(page, w) {
				t.Errorf("the %s job's page lacks %q:\n%s", name, w, page)
			}
		}
		_, page = f.do(c, "GET", Prefix+"devices/"+dev.ID, nil, nil)
		how := regexp.MustCompile(`<dd id="job-how">([^<]*)</dd>`).FindStringSubmatch(want[name][1])[1]
		took := regexp.MustCompile(`<dd id="job-took">([^<]*)</dd>`).FindStringSubmatch(want[name][2])[1]
		state := regexp.MustCompile(`class="badge \w+">\w+</span>`).FindString(want[name][0])
		for _, w := range []string{`<td data-label="State"><span ` + state + `</td>`, `<td data-label="Took">` + took + `</td>`, `<td data-label="Exit">` + how + `</td>`} {
			if !strings.Contains(page, w) {
				t.Errorf("the %s job's row lacks %q:\n%s", name, w, page)
			}
		}
	}
}

// TestPrincipalsShowAsPeopleNamedThem: a job's owner, a prompt's asker
// and an audit entry's principal that is a token's own ID show as the CLI
// shows them, the token's own ID, with the token's name beside it; a
// principal a person chose shows as itself.
func TestPrincipalsShowAsPeopleNamedThem(t *testing.T) {
	f, _ := newSecretFixture(t)
	dev := enrolled(t, f, "box")
	spec := store.TokenSpec{Name: "laptop", Devices: []string{"*"}, Tools: []string{"*"}, TTL: time.Hour}
	laptop, _, err := f.state.CreateToken(spec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	spec.Name, spec.Principal = "ci", "alice"
	ci, _, err := f.state.CreateToken(spec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.devices.fn = func(tool string, _ json.RawMessage) (json.RawMessage, error) {
		switch tool {
		case "process.jobs":
			return json.RawMessage(`{"jobs":[{"process_id":"` + job1 + `","owner":"` + laptop.ID + `","state":"running"},
				{"process_id":"` + job1 + `","owner":"alice","state":"running"}]}`), nil
		case "process.status":
			return json.RawMessage(`{"process_id":"` + job1 + `","owner":"` + laptop.ID + `","state":"running"}`), nil
		}
		return json.RawMessage(`{"state":"running","stdout":{},"stderr":{}}`), nil
	}
	now := time.Now()
	f.state.AppendAudit([]store.AuditEntry{{At: now, Principal: laptop.ID, TokenID: laptop.ID, Tool: "process.jobs", Outcome: store.AuditOK}}, now)
	c := f.signIn("olga")
	byLaptop := `<span title="the principal of token laptop, its own ID">` + laptop.ID + ` <span class="off">(token laptop)</span></span>`
	pages := map[string][]string{
		Prefix + "devices/" + dev.ID: {`<td data-label="Owner">` + byLaptop + `</td>`, `<td data-label="Owner"><span title="principal alice">alice</span></td>`},
		jobPath(dev.ID, job1):        {`<dt>Owner</dt><dd>` + byLaptop + `</dd>`},
		Prefix + "audit":             {`<td data-label="Principal">` + byLaptop + `</td>`},
	}
	for _, asker := range []store.SecretPrompt{{TokenID: laptop.ID, Principal: laptop.ID}, {TokenID: ci.ID, Principal: "alice"}} {
		asker.Device, asker.ProcessID, asker.Prompt = dev.ID, job1, "Key:"
		id, err := f.state.CreateSecretPrompt(asker, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		want := byLaptop
		if asker.TokenID == ci.ID {
			want = `<span title="principal alice">alice</span>, with the token <span title="token ` + ci.ID + `">ci</span>`
		}
		pages[SecretPath+id] = []string{`<dd id="asked-by">` + want + `</dd>`, `<dd id="job-owner">` + byLaptop + `</dd>`}
	}
	for path, wants := range pages {
		_, page := f.do(c, "GET", path, nil, nil)
		for _, w := range wants {
			if !strings.Contains(page, w) {
				t.Errorf("%s lacks %q:\n%s", path, w, page)
			}
		}
		if strings.Contains(page, ">"+laptop.ID+"<") {
			t.Errorf("%s shows the token's ID for its name:\n%s", path, page)
		}
	}
}

// TestFaviconAndCopyButton: /favicon.ico is the panel's embedded icon,
// with the panel's headers; a created token and an enrollment line have
// a copy button, driven by a script file (no inline script or handler).
func TestFaviconAndCopyButton(t *testing.T) {
	f := newFixture(t, false)
	anon := f.client()
	for _, path := range []string{"/favicon.ico", Prefix + "static/icon.svg"} {
		resp, body := f.do(anon, "GET", path, nil, nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/svg+xml" || !strings.HasPrefix(body, "<svg ") {
			t.Errorf("GET %s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		wantHeaders(t, "GET "+path, resp)
	}
	c := f.signIn("alice")
	_, page := f.do(c, "POST", Prefix+"tokens", map[string][]string{"csrf": {f.csrf(c)}, "name": {"laptop"}, "ttl": {"1d"}}, nil)
	for _, w := range []string{`<code id="new-token">cct_`, `<button type="button" data-copy="new-token">Copy</button>`,
		`<script src="/panel/static/copy.js" defer></script>`, `<link rel="icon" href="/panel/static/icon.svg" type="image/svg+xml">`} {
		if !strings.Contains(page, w) {
			t.Errorf("the new token's page lacks %q:\n%s", w, page)
		}
	}
	_, enroll := f.do(c, "POST", Prefix+"enroll", map[string][]string{"csrf": {f.csrf(c)}}, nil)
	if !strings.Contains(enroll, `data-copy="enroll-line"`) {
		t.Errorf("the enrollment line has no copy button:\n%s", enroll)
	}
	if strings.Contains(enroll, `id="install-line"`) && !strings.Contains(enroll, `<button type="button" data-copy="install-line">Copy</button>`) {
		t.Errorf("the install line has no copy button:\n%s", enroll)
	}
	inline := regexp.MustCompile(`<script>|<script [^>]*>[^<]|\son[a-z]+=|<style`)
	for _, p := range []string{page, enroll} {
		if m := inline.FindString(p); m != "" {
			t.Errorf("a page has inline script or style: %q", m)
		}
	}
	resp, js := f.do(anon, "GET", Prefix+"static/copy.js", nil, nil)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") || !strings.Contains(js, "clipboard.writeText") {
		t.Errorf("copy.js: %q", resp.Header.Get("Content-Type"))
	}
}

// TestAuditRowsLinkToTheirJob: an entry naming a device and a job by
// their IDs links to the job's page, and the job's page to its entries;
// an entry whose device is not named by its ID gets no link. The panel's
// own calls about a job name it.
func TestAuditRowsLinkToTheirJob(t *testing.T) {
	f := newFixture(t, false)
	dev := enrolled(t, f, "box")
	now := time.Now()
	if err := f.state.AppendAudit([]store.AuditEntry{
		{At: now, Principal: "x", Device: dev.ID, Job: job1, Tool: "process.start", Outcome: store.AuditOK},
		{At: now, Principal: "x", Device: "box", Job: job1, Tool: "process.status", Outcome: store.AuditOK},
		{At: now, Principal: "x", Device: dev.ID, Tool: "process.jobs", Outcome: store.AuditOK},
	}, now); err != nil {
		t.Fatal(err)
	}
	c := f.signIn("alice")
	_, page := f.do(c, "GET", Prefix+"audit", nil, nil)
	links := regexp.MustCompile(`<td data-label="Job">(.*?)</td>`).FindAllStringSubmatch(page, -1)
	var got []string
	for _, l := range links {
		got = append(got, l[1])
	}
	want := []string{"", "", `<a href="` + jobPath(dev.ID, job1) + `"><code>0f8fad5b</code></a>`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("the audit rows' job cells %q, want %q", got, want)
	}
	_, page = f.do(c, "GET", Prefix+"audit?job="+job1, nil, nil)
	if n := strings.Count(page, `<td data-label="#">`); n != 2 || !strings.Contains(page, `name="job" value="`+job1+`"`) {
		t.Errorf("the audit filtered by job shows %d entries:\n%s", n, page)
	}

	f.devices.fn = func(tool string, _ json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"process_id":"` + job1 + `","state":"running"}`), nil
	}
	f.mu.Lock()
	f.audited = nil
	f.mu.Unlock()
	_, page = f.do(c, "GET", jobPath(dev.ID, job1), nil, nil)
	if !strings.Contains(page, `<a href="/panel/audit?job=`+job1+`" id="job-audit">`) {
		t.Errorf("the job page does not link to its audit entries:\n%s", page)
	}
	f.do(c, "POST", jobPath(dev.ID, job1)+"/stop", map[string][]string{"csrf": {f.csrf(c)}}, nil)
	f.devices.fn = func(tool string, _ json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"jobs":[]}`), nil
	}
	f.do(c, "GET", Prefix+"devices/"+dev.ID, nil, nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	got = nil
	for _, e := range f.audited {
		got = append(got, e.Tool+" "+e.Job)
	}
	if want := []string{"process.status " + job1, "process.stop " + job1, "process.jobs "}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("the panel's calls audited %q, want %q", got, want)
	}
}

// TestToolsAreSummarized: a scope's tools show as every tool, the fewest
// presets that are exactly them, up to three by name, or how many, with
// the list behind a disclosure whenever the summary does not name them.
func TestToolsAreSummarized(t *testing.T) {
	run, _ := authz.PresetTools([]string{"run"})
	readWrite, _ := authz.PresetTools([]string{"read", "write"})
	runWrite, _ := authz.PresetTools([]string{"run", "write"})
	sixteen := append(slices.Clone(runWrite[:15]), "files.edit")
	for _, c := range []struct {
		tools []string
		short string
		all   bool
	}{
		{[]string{"*"}, "all tools", false},
		{run, "run", true},
		{readWrite, "write", true},
		{runWrite, "run, write", true},
		{[]string{"process.jobs"}, "process.jobs", false},
		{[]string{"process.jobs", "process.status", "files.read"}, "process.jobs, process.status, files.read", false},
		{[]string{"process.jobs", "process.status", "files.read", "files.list"}, "4 tools", true},
		{sixteen, "16 tools", true},
	} {
		got := summarize(c.tools)
		if got.Short != c.short || (got.All != nil) != c.all {
			t.Errorf("summarize(%v) = %+v, want %q (list shown %v)", c.tools, got, c.short, c.all)
		}
		if c.all && !slices.Equal(got.All, c.tools) {
			t.Errorf("summarize(%v) lists %v", c.tools, got.All)
		}
	}
}
