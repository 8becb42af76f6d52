package panel

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestSignInPageOffersOnlyWhatTheRelayHas: a relay without SSO or
// passkeys shows the code field alone, and its SSO and passkey endpoints
// refuse; a signed-in admin's Passkeys page says passkeys are not to be
// had here, and removing one that is not theirs is a 404, audited.
func TestSignInPageOffersOnlyWhatTheRelayHas(t *testing.T) {
	f := newFixture(t, false)
	c := f.client()
	_, page := f.do(c, "GET", LoginPath, nil, nil)
	if !strings.Contains(page, `id="code"`) || strings.Contains(page, "signin-sso") || strings.Contains(page, "signin-passkey") {
		t.Fatalf("the sign-in page of a relay with codes only:\n%s", page)
	}
	if resp, _ := f.do(c, "POST", LoginPath+"/sso", url.Values{"next": {"/panel/"}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("SSO start without SSO: %d", resp.StatusCode)
	}
	if resp, page := f.do(c, "GET", "/panel/login/sso/callback?state=x&code=y", nil, nil); resp.StatusCode != http.StatusForbidden || !strings.Contains(page, signInRefused) {
		t.Errorf("an SSO callback without SSO: %d", resp.StatusCode)
	}
	for _, path := range []string{LoginPath + "/passkey/begin", LoginPath + "/passkey"} {
		resp, body := f.do(c, "POST", path, url.Values{}, nil)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not allowed") || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s without passkeys: %d %s", path, resp.StatusCode, body)
		}
	}

	admin := f.signIn("alice")
	_, page = f.do(admin, "GET", Prefix+"passkeys", nil, nil)
	if !strings.Contains(page, "reached by a host name") || strings.Contains(page, "add-passkey") || !strings.Contains(page, "You have no passkey yet.") {
		t.Fatalf("the Passkeys page without passkeys:\n%s", page)
	}
	csrf := f.csrf(admin)
	if resp, body := f.do(admin, "POST", Prefix+"passkeys/begin", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("adding a passkey here: %d %s", resp.StatusCode, body)
	}
	if resp, _ := f.do(admin, "POST", Prefix+"passkeys", url.Values{"csrf": {csrf}, "credential": {"{}"}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("finishing a passkey here: %d", resp.StatusCode)
	}
	if err := f.state.AddPasskey("alice", []byte("k1"), []byte("{}"), time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"bm9uZQ", "!!"} {
		if resp, _ := f.do(admin, "POST", Prefix+"passkeys/"+id+"/remove", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("removing passkey %q: %d", id, resp.StatusCode)
		}
	}
	if resp, _ := f.do(admin, "POST", Prefix+"passkeys/azE/remove", url.Values{}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("removing without the CSRF token: %d", resp.StatusCode)
	}
	_, page = f.do(admin, "GET", Prefix+"passkeys", nil, nil)
	if !strings.Contains(page, `data-passkey="azE"`) {
		t.Fatalf("alice's passkey is not listed:\n%s", page)
	}
	if resp, _ := f.do(admin, "POST", Prefix+"passkeys/azE/remove", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("removing her passkey: %d", resp.StatusCode)
	}
	if keys, _ := f.state.Passkeys("alice"); len(keys) != 0 {
		t.Errorf("still %d passkeys", len(keys))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var removals []string
	for _, e := range f.audited {
		if e.Tool == "panel.passkey_remove" {
			removals = append(removals, e.Outcome+":"+e.Code)
		}
	}
	if strings.Join(removals, " ") != "failed:not_found failed:not_found ok:" {
		t.Errorf("passkey removals audited as %v", removals)
	}
}
