package panel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/relay/store"
)

// TestEverySignedInPageAnswers: each page a signed-in admin opens is a
// page, not a refusal.
func TestEverySignedInPageAnswers(t *testing.T) {
	f := newFixture(t, false)
	enrolled(t, f, "box")
	c := f.signIn("alice")
	for _, path := range []string{"", "devices", "devices/box", "tokens", "enroll", "audit", "audit?before=x"} {
		if resp, page := f.do(c, "GET", Prefix+path, nil, nil); resp.StatusCode != http.StatusOK || !strings.Contains(page, `<span>alice</span>`) {
			t.Errorf("GET /panel/%s: %d", path, resp.StatusCode)
		}
	}
}

// TestDevicesNameTheReplicaHoldingTheLink: a device held by a live
// replica shows its name; one held by a replica that is gone, its ID; one
// not held, nothing. The Device page shows that device, not another.
func TestDevicesNameTheReplicaHoldingTheLink(t *testing.T) {
	f := newFixture(t, false)
	now := time.Now()
	if err := f.state.JoinReplica(store.Replica{ID: "r-1", Name: "east", Address: "https://east.example"}, now); err != nil {
		t.Fatal(err)
	}
	held, gone, idle := enrolled(t, f, "held"), enrolled(t, f, "gone"), enrolled(t, f, "idle")
	for dev, rep := range map[string]string{held.ID: "r-1", gone.ID: "r-gone"} {
		if ok, err := f.state.TakeLink(dev, rep, "", now); err != nil || !ok {
			t.Fatalf("TakeLink(%s): %v %v", rep, ok, err)
		}
	}
	c := f.signIn("alice")
	_, page := f.do(c, "GET", Prefix+"devices", nil, nil)
	for dev, want := range map[string]string{held.ID: "east", gone.ID: "r-gone", idle.ID: ""} {
		re := regexp.MustCompile(`(?s)<tr data-device="` + dev + `">.*?<td data-label="Replica" data-field="replica">([^<]*)</td>`)
		if m := re.FindStringSubmatch(page); m == nil || m[1] != want {
			t.Errorf("device %s's replica: %v, want %q", dev, m, want)
		}
	}
	f.devices.fn = func(string, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"jobs":[]}`), nil }
	for _, dev := range []*store.Device{held, gone, idle} {
		_, page := f.do(c, "GET", Prefix+"devices/"+dev.Name, nil, nil)
		if !strings.Contains(page, `<dt>ID</dt><dd><code>`+dev.ID+`</code></dd>`) {
			t.Errorf("the page of %s does not show its ID:\n%s", dev.Name, page)
		}
	}
	if _, page = f.do(c, "GET", Prefix+"devices/held", nil, nil); !strings.Contains(page, "through east since") {
		t.Errorf("the held device's page does not name its replica:\n%s", page)
	}
}

// TestDeviceCallsAreAuditedAsTheAdmin: each device call the panel makes
// is an audit entry by admin:<name> naming the tool, the device and the
// outcome.
func TestDeviceCallsAreAuditedAsTheAdmin(t *testing.T) {
	f := newFixture(t, false)
	dev := enrolled(t, f, "box")
	c := f.signIn("alice")
	f.devices.fn = func(string, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"jobs":[]}`), nil }
	f.do(c, "GET", Prefix+"devices/box", nil, nil)
	f.devices.fn = nil
	f.do(c, "GET", Prefix+"devices/box", nil, nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	var got []string
	for _, e := range f.audited {
		if e.Tool == "process.jobs" {
			got = append(got, e.Principal+" "+e.Device+" "+e.Outcome+" "+e.Code)
		}
	}
	want := []string{"admin:alice " + dev.ID + " ok ", "admin:alice " + dev.ID + " failed device_offline"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("audited %q, want %q", got, want)
	}
}

// TestJobIDsAreShortOnTheDevicePage: a job's ID shows as its first 8
// characters.
func TestJobIDsAreShortOnTheDevicePage(t *testing.T) {
	f := newFixture(t, false)
	enrolled(t, f, "box")
	c := f.signIn("alice")
	f.devices.fn = func(string, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"jobs":[{"process_id":"` + job1 + `","state":"running"},{"process_id":"p1","state":"running"}]}`), nil
	}
	_, page := f.do(c, "GET", Prefix+"devices/box", nil, nil)
	if !strings.Contains(page, `<code>0f8fad5b</code></a>`) || strings.Contains(page, `<code>`+job1+`</code>`) || !strings.Contains(page, `<code>p1</code>`) {
		t.Errorf("job IDs on the device page:\n%s", page)
	}
}

// TestSignOutClearsTheCookie: signing out tells the browser to drop the
// cookie at once.
func TestSignOutClearsTheCookie(t *testing.T) {
	for _, secure := range []bool{false, true} {
		f := newFixture(t, secure)
		c := f.signIn("alice")
		resp, _ := f.do(c, "POST", Prefix+"logout", url.Values{"csrf": {f.csrf(c)}}, nil)
		ck := resp.Cookies()
		if len(ck) != 1 || ck[0].Name != CookieName || ck[0].Value != "" || ck[0].MaxAge >= 0 || !ck[0].HttpOnly || ck[0].Secure != secure ||
			!strings.Contains(resp.Header.Get("Set-Cookie"), "Max-Age=0") {
			t.Errorf("sign-out cookie %+v (%q)", ck, resp.Header.Get("Set-Cookie"))
		}
	}
}

// TestSameOriginWithoutFetchMetadata: a browser that sends no
// Sec-Fetch-Site is judged by its Origin: the panel's own is accepted,
// also in another letter case, and so is a request with none.
func TestSameOriginWithoutFetchMetadata(t *testing.T) {
	f := newFixture(t, false)
	c := f.signIn("alice")
	host := strings.TrimPrefix(f.srv.URL, "http://")
	for i, origin := range []string{"http://" + host, "HTTP://" + strings.ToUpper(host), ""} {
		hdr := map[string]string{}
		if origin != "" {
			hdr["Origin"] = origin
		}
		resp, _ := f.do(c, "POST", Prefix+"tokens", url.Values{"csrf": {f.csrf(c)}, "name": {fmt.Sprintf("t%d", i)}, "ttl": {"1h"}}, hdr)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Origin %q: %d", origin, resp.StatusCode)
		}
	}
	for _, origin := range []string{"http://" + host + ".evil.example", "http://%zz", "file://"} {
		resp, _ := f.do(c, "POST", Prefix+"tokens", url.Values{"csrf": {f.csrf(c)}, "name": {"x"}, "ttl": {"1h"}}, map[string]string{"Origin": origin})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("Origin %q: %d, want 403", origin, resp.StatusCode)
		}
	}
}
