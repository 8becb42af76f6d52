package oauth

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/limits"
)

// TestFormAndRegistrationAtTheirBound: a form or a registration of
// exactly limits.OAuthMaxFormBytes is read, one byte more is refused.
func TestFormAndRegistrationAtTheirBound(t *testing.T) {
	pad := func(n int, prefix string) []byte { return []byte(prefix + strings.Repeat("x", n-len(prefix))) }
	if _, err := ParseForm(pad(limits.OAuthMaxFormBytes, "a=")); err != nil {
		t.Errorf("a form at the bound: %v", err)
	}
	if _, err := ParseForm(pad(limits.OAuthMaxFormBytes+1, "a=")); err != ErrForm {
		t.Errorf("a form past the bound: %v", err)
	}
	reg := func(n int) []byte {
		head := `{"redirect_uris":["` + loopback + `"],"client_name":"`
		return []byte(head + strings.Repeat("x", n-len(head)-2) + `"}`)
	}
	if _, rerr := DecodeRegistration(reg(limits.OAuthMaxFormBytes)); rerr != nil {
		t.Errorf("a registration at the bound: %+v", rerr)
	}
	if _, rerr := DecodeRegistration(reg(limits.OAuthMaxFormBytes + 1)); rerr == nil || rerr.code != ErrInvalidClientMetadata {
		t.Errorf("a registration past the bound: %+v", rerr)
	}
}

// TestVerifierAndChallengeShapes: a PKCE verifier is 43 to 128 of its
// characters; a challenge is exactly 43 of base64url's.
func TestVerifierAndChallengeShapes(t *testing.T) {
	for v, want := range map[string]bool{
		strings.Repeat("a", 42): false, strings.Repeat("a", 43): true, strings.Repeat("a", 128): true,
		strings.Repeat("a", 129): false, strings.Repeat("a", 42) + "~": true, strings.Repeat("a", 42) + "!": false,
	} {
		if validVerifier(v) != want {
			t.Errorf("validVerifier(%d bytes ending %q) = %v", len(v), v[len(v)-1:], !want)
		}
	}
	for c, want := range map[string]bool{
		challenge: true, challenge[:42]: false, challenge + "A": false, strings.Repeat("!", 43): false,
	} {
		if validChallenge(c) != want {
			t.Errorf("validChallenge(%q) = %v", c, !want)
		}
	}
}

// TestLoopbackPortsOnlyOverHTTP: another port is allowed only to an HTTP
// loopback redirect; HTTPS to the same host and port must be registered.
func TestLoopbackPortsOnlyOverHTTP(t *testing.T) {
	reg := []string{"http://127.0.0.1:33418/callback"}
	for given, want := range map[string]bool{
		"http://127.0.0.1:5555/callback":   true,
		"https://127.0.0.1:5555/callback":  false,
		"https://127.0.0.1:33418/callback": false,
	} {
		if matchRedirect(reg, given) != want {
			t.Errorf("matchRedirect(%s) = %v", given, !want)
		}
	}
}

// TestCheckPanelURL: the panel's URL is http(s) with a host, without
// user, query or fragment.
func TestCheckPanelURL(t *testing.T) {
	for _, good := range []string{"https://relay.example/panel/", "http://127.0.0.1:8441/panel/"} {
		if err := CheckPanelURL(good); err != nil {
			t.Errorf("%s: %v", good, err)
		}
	}
	for _, bad := range []string{"relay.example/panel/", "ftp://relay.example/panel/", "https:///panel/", "https://u@relay.example/panel/",
		"https://relay.example/panel/?x=1", "https://relay.example/panel/#f", "https://relay.example/panel/#", "%zz"} {
		if err := CheckPanelURL(bad); err != ErrPanelURL {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestClientNamingAndRequiredParameters: HTTP Basic may repeat the
// client_id the form names, not name another; a client_id that is no
// client's shape is invalid_client; a code request needs its code and
// redirect_uri; a refresh for another of the relay's resources is
// refused (and spends the token); a revocation may come with Basic and no
// password, not with one; an authorization request names one client.
func TestClientNamingAndRequiredParameters(t *testing.T) {
	f := newFixture(t, nil)
	id := f.register(t, loopback)
	basic := func(path string, form url.Values, user, pass string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, f.hs.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(url.QueryEscape(user), pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status := basic(TokenPath, codeForm(id, f.code(t, id, loopback), loopback), id, ""); status != http.StatusOK {
		t.Errorf("Basic repeating the form's client_id: %d", status)
	}
	other := f.register(t, loopback)
	if status := basic(TokenPath, codeForm(id, f.code(t, id, loopback), loopback), other, ""); status != http.StatusUnauthorized {
		t.Errorf("Basic naming another client than the form: %d", status)
	}
	form := codeForm("not-a-client", "cac_x", loopback)
	status, body := f.post(t, TokenPath, form)
	wantError(t, "a client_id of no client's shape", status, body, 401, ErrInvalidClient)
	for _, missing := range []string{"code", "redirect_uri"} {
		form := codeForm(id, f.code(t, id, loopback), loopback)
		form.Del(missing)
		status, body := f.post(t, TokenPath, form)
		wantError(t, "no "+missing, status, body, 400, ErrInvalidRequest)
	}

	_, body = f.post(t, TokenPath, codeForm(id, f.code(t, id, loopback), loopback))
	refresh, access := body["refresh_token"].(string), body["access_token"].(string)
	status, body = f.post(t, TokenPath, url.Values{"grant_type": {"refresh_token"}, "client_id": {id}, "refresh_token": {refresh}, "resource": {public + "/mcp/dev2"}})
	wantError(t, "a refresh for another resource", status, body, 400, ErrInvalidTarget)
	// Spent by the refused refresh: a retry is accepted once more within
	// its grace, and then no more.
	rf := url.Values{"grant_type": {"refresh_token"}, "client_id": {id}, "refresh_token": {refresh}, "resource": {resource}}
	if status, body = f.post(t, TokenPath, rf); status != http.StatusOK {
		t.Errorf("a retry within the grace: %d %v", status, body)
	}
	status, body = f.post(t, TokenPath, rf)
	wantError(t, "the refresh token spent by the refused refresh and its grace", status, body, 400, ErrInvalidGrant)

	if status := basic(RevokePath, url.Values{"token": {access}}, id, "a secret"); status != http.StatusUnauthorized {
		t.Errorf("revocation with a password: %d", status)
	}
	if status := basic(RevokePath, url.Values{"token": {access}}, id, ""); status != http.StatusOK {
		t.Errorf("revocation with Basic and no password: %d", status)
	}

	q := url.Values{"client_id": {id, id}, "redirect_uri": {loopback}, "response_type": {"code"}, "code_challenge": {challenge},
		"code_challenge_method": {"S256"}, "resource": {resource}}
	if resp := f.authorize(t, q); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
		t.Errorf("two client_ids: %d, to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestRegistrationAtItsBoundsOverHTTP: a registration of exactly the
// form bound is read whole at the endpoint, and a client may register
// exactly OAuthMaxRedirectURIs redirect URIs, not one more.
func TestRegistrationAtItsBoundsOverHTTP(t *testing.T) {
	f := newFixture(t, nil)
	head := `{"redirect_uris":["` + loopback + `"],"client_name":"`
	body := head + strings.Repeat("x", limits.OAuthMaxFormBytes-len(head)-2) + `"}`
	resp, err := http.Post(f.hs.URL+RegisterPath, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("a registration of exactly %d bytes: %d", len(body), resp.StatusCode)
	}
	uris := func(n int) []byte {
		var list []string
		for i := range n {
			list = append(list, fmt.Sprintf("https://client.example/cb%d", i))
		}
		b, _ := json.Marshal(map[string]any{"redirect_uris": list})
		return b
	}
	if _, rerr := DecodeRegistration(uris(limits.OAuthMaxRedirectURIs)); rerr != nil {
		t.Errorf("%d redirect URIs: %+v", limits.OAuthMaxRedirectURIs, rerr)
	}
	if _, rerr := DecodeRegistration(uris(limits.OAuthMaxRedirectURIs + 1)); rerr == nil || rerr.code != ErrInvalidRedirectURI {
		t.Errorf("%d redirect URIs: %+v", limits.OAuthMaxRedirectURIs+1, rerr)
	}
}
